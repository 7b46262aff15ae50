// The coordinator's live dashboard: one HTML page (dashboard.html, inline
// CSS and JavaScript, no external resources) and the read-only JSON APIs it
// polls every second, served on the coordinator's HTTP server
// (common/http_server.h, which authenticates every request):
//
//   GET /                     the page (?job=ID selects a job)
//   GET /api/info             version, gRPC address, host, time
//   GET /api/workers          every worker: state, health, heartbeat age,
//                             device memory, job and stage
//   GET /api/jobs             the newest jobs: state, steps, samples/s,
//                             loss, attempt, restarts
//   GET /api/job?id=J         one job: loss curve, evaluations, throughput
//                             history, live stages, plan, restarts
//   GET /api/timeline?id=J    the last seconds of the job's trace per stage
//                             replica: forward, backward, send, recv, ...
//
// The documents are built by views.h from CoordinatorCore's read methods;
// their bounds are in ViewLimits. Errors are JSON {"error": ...} with 400
// (a missing or malformed parameter, named), 404 (no such job) or 500.
//
// Thread-safety: the handlers are thread-safe (CoordinatorCore is).
#ifndef AQUEDUCT_COORDINATOR_DASHBOARD_DASHBOARD_H_
#define AQUEDUCT_COORDINATOR_DASHBOARD_DASHBOARD_H_

#include <string>

#include "common/http_server.h"
#include "coordinator/core.h"
#include "coordinator/dashboard/views.h"

namespace aqueduct {

// Registers the routes above on `server` (call before server->Start()).
// `core` is not owned and must outlive the server. `grpc_address`: the
// coordinator's --listen, shown in the page's header.
void AddDashboardRoutes(CoordinatorCore* core, HttpServer* server,
                        const std::string& grpc_address = "",
                        const ViewLimits& limits = ViewLimits());

// The page (dashboard.html, embedded at build time).
extern const char kDashboardPage[];

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_DASHBOARD_DASHBOARD_H_
