#include "worker/runtime/data_plane.h"

#include "pipeline/schedule.h"
#include "worker/runtime/frame.h"

namespace aqueduct {

void DataPlane::Abort() const {
  if (comm != nullptr) comm->Abort();
  if (channels != nullptr) channels->Abort();
}

std::vector<ChannelKey> PipelineChannelKeys(const PipelineLayout& layout) {
  std::vector<ChannelKey> keys;
  for (int s = 0; s + 1 < layout.num_stages(); ++s) {
    const std::vector<int>& here = layout.ranks[s];
    const std::vector<int>& next = layout.ranks[s + 1];
    const int here_n = static_cast<int>(here.size());
    const int next_n = static_cast<int>(next.size());
    for (int j = 0; j < here_n * next_n; ++j) {
      const int from = here[ReplicaFor(j, here_n)];
      const int to = next[ReplicaFor(j, next_n)];
      keys.push_back({static_cast<int>(FrameKind::kActivation), from, to});
      keys.push_back({static_cast<int>(FrameKind::kGradient), to, from});
    }
  }
  return keys;
}

}  // namespace aqueduct
