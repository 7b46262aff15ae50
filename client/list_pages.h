// Listing every page of a coordinator's list call (ListJobs, ListWorkers)
// for aq: pages are fetched in turn and merged into one response, so that
// `aq jobs` and `aq workers` show everything as one table or one JSON
// document however many pages the coordinator cuts it into.
//
// Bounded: at most kMaxListPages pages (enough for 5 million workers or a
// million jobs at the page sizes aq asks for), and a page token the
// coordinator sent before ends the listing too, so a misbehaving
// coordinator cannot keep aq looping. Either is said on `warnings`.
//
// Thread-safety: stateless.
#ifndef AQUEDUCT_CLIENT_LIST_PAGES_H_
#define AQUEDUCT_CLIENT_LIST_PAGES_H_

#include <ostream>
#include <set>
#include <string>

#include "absl/status/statusor.h"

namespace aqueduct {

inline constexpr int kMaxListPages = 1000;

// Every page of a list call merged into one response (without a
// next_page_token). `fetch(request)` returns the page `request` asks for
// (an absl::StatusOr<Response>); `page_size` goes in each request; `what`
// ("jobs") names the items in warnings. The first failed fetch's status.
template <typename Request, typename Response, typename Fetch>
absl::StatusOr<Response> FetchAllPages(Request request, int page_size,
                                       const std::string& what, Fetch fetch,
                                       std::ostream& warnings) {
  request.set_page_size(page_size);
  Response all;
  std::set<std::string> seen;
  for (int page = 0; page < kMaxListPages; ++page) {
    absl::StatusOr<Response> response = fetch(request);
    if (!response.ok()) return response.status();
    const std::string next = response->next_page_token();
    all.MergeFrom(*response);
    all.clear_next_page_token();
    if (next.empty()) return all;
    if (!seen.insert(next).second) {
      warnings << "aq: the coordinator sent the same page of " << what
               << " again; showing what it sent before\n";
      return all;
    }
    request.set_page_token(next);
  }
  warnings << "aq: showing the first " << kMaxListPages << " pages of " << what
           << "; the coordinator has more\n";
  return all;
}

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_LIST_PAGES_H_
