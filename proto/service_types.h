// The aqueduct.v1 service messages under short names in namespace aqueduct.
// Messages only: the gRPC stubs are in proto/service.grpc.pb.h.
#ifndef AQUEDUCT_PROTO_SERVICE_TYPES_H_
#define AQUEDUCT_PROTO_SERVICE_TYPES_H_

#include "proto/control.pb.h"
#include "proto/types.h"

namespace aqueduct {

using v1::CheckpointFile;
using v1::CheckpointManifest;
using v1::CheckpointWritten;
using v1::DeviceInfo;
using v1::InFlight;
using v1::JobState;
using v1::JobStatus;
using v1::LossPoint;
using v1::StageAssignment;
using v1::StageProgress;
using v1::StageStatus;
using v1::TraceEvent;
using v1::WorkerInfo;
using v1::WorkerRuntimeStatus;
using v1::WorkerState;
using v1::WorkerStatus;

}  // namespace aqueduct

#endif  // AQUEDUCT_PROTO_SERVICE_TYPES_H_
