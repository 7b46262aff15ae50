#include "worker/runtime/data_parallel.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"

namespace aqueduct {

std::vector<std::pair<int64_t, int64_t>> FlatLayout::Owned(int r, int d) const {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const Bucket& b : buckets) {
    const ProcessGroup::Part part =
        ProcessGroup::PartOf(static_cast<size_t>(b.end - b.begin), d, r);
    if (part.end > part.begin) {
      ranges.emplace_back(b.begin + static_cast<int64_t>(part.begin),
                          b.begin + static_cast<int64_t>(part.end));
    }
  }
  return ranges;
}

FlatLayout MakeFlatLayout(const ParameterSet& params, int64_t bucket_floats) {
  FlatLayout layout;
  layout.offset.assign(params.size(), 0);
  FlatLayout::Bucket open;
  int64_t at = 0;
  for (int l = params.end - 1; l >= params.begin; --l) {
    const int i = l - params.begin;
    if (params.offsets[i] == params.offsets[i + 1]) continue;
    for (int t = params.offsets[i]; t < params.offsets[i + 1]; ++t) {
      layout.offset[t] = at;
      at += params.tensors[t].numel();
    }
    open.end = at;
    open.lowest_layer = l;
    if (open.end - open.begin >= bucket_floats) {
      layout.buckets.push_back(open);
      open.begin = at;
    }
  }
  if (open.end > open.begin) layout.buckets.push_back(open);
  layout.total = at;
  return layout;
}

int64_t BucketFloats(double bucket_mb, int64_t total_floats) {
  constexpr double kDdpDefaultMb = 25.0;
  if (bucket_mb > 0) {
    return std::max<int64_t>(
        1, static_cast<int64_t>(bucket_mb * 1024 * 1024 / sizeof(float)));
  }
  const auto ddp =
      static_cast<int64_t>(kDdpDefaultMb * 1024 * 1024 / sizeof(float));
  return std::max<int64_t>(1, std::min(ddp, total_floats / 4));
}

Tensor FlatSlice(const Tensor& flat, int64_t begin, int64_t end) {
  return flat.Reshape(Shape({flat.numel()})).Rows(begin, end);
}

absl::StatusOr<ParameterSet> FlatZerosLike(const ParameterSet& like,
                                           const FlatLayout& layout,
                                           Device* device, Tensor* flat) {
  ASSIGN_OR_RETURN(*flat, device->Zeros(Shape({layout.total}), DType::kF32));
  ParameterSet set = like;
  for (size_t t = 0; t < set.tensors.size(); ++t) {
    const int64_t at = layout.offset[t];
    set.tensors[t] = FlatSlice(*flat, at, at + like.tensors[t].numel())
                         .Reshape(like.tensors[t].shape());
  }
  return set;
}

ParameterSet RangeViews(const ParameterSet& set, const FlatLayout& layout,
                        const std::vector<std::pair<int64_t, int64_t>>& ranges,
                        std::vector<int64_t>* starts) {
  ParameterSet views;
  views.offsets = {0};
  for (size_t t = 0; t < set.tensors.size(); ++t) {
    const int64_t begin = layout.offset[t];
    const int64_t end = begin + set.tensors[t].numel();
    for (const auto& [lo, hi] : ranges) {
      const int64_t a = std::max(begin, lo), b = std::min(end, hi);
      if (a >= b) continue;
      views.names.push_back(set.names[t]);
      views.tensors.push_back(FlatSlice(set.tensors[t], a - begin, b - begin));
      if (starts != nullptr) starts->push_back(a - begin);
    }
  }
  return views;
}

namespace {

// Calls fn(t, a, b) for every tensor t of `set` overlapping [lo, hi) of the
// flat layout, with the overlap [a, b) in flat elements.
void ForEachOverlap(const ParameterSet& set, const FlatLayout& layout,
                    int64_t lo, int64_t hi,
                    const std::function<void(size_t, int64_t, int64_t)>& fn) {
  for (size_t t = 0; t < set.tensors.size(); ++t) {
    const int64_t begin = layout.offset[t];
    const int64_t a = std::max(begin, lo);
    const int64_t b = std::min(begin + set.tensors[t].numel(), hi);
    if (a < b) fn(t, a, b);
  }
}

}  // namespace

ParameterSet FlatRangeViews(const ParameterSet& like, const FlatLayout& layout,
                            int64_t lo, int64_t hi, const Tensor& flat_range,
                            std::vector<int64_t>* starts) {
  ParameterSet views;
  views.offsets = {0};
  ForEachOverlap(like, layout, lo, hi, [&](size_t t, int64_t a, int64_t b) {
    views.names.push_back(like.names[t]);
    views.tensors.push_back(FlatSlice(flat_range, a - lo, b - lo));
    if (starts != nullptr) starts->push_back(a - layout.offset[t]);
  });
  return views;
}

absl::Status CopyRangeHost(Device* device, const FlatLayout& layout,
                           const ParameterSet& set, int64_t lo, int64_t hi,
                           float* host, bool to_host) {
  absl::Status status;
  ForEachOverlap(set, layout, lo, hi, [&](size_t t, int64_t a, int64_t b) {
    if (!status.ok()) return;
    const int64_t start = a - layout.offset[t];
    const Tensor in_set = FlatSlice(set.tensors[t], start, start + (b - a));
    status = to_host ? device->CopyToHost(in_set, host + (a - lo))
                     : device->CopyFromHost(host + (a - lo), in_set);
  });
  return status;
}

void CopyRange(Device* device, const FlatLayout& layout,
               const ParameterSet& set, int64_t lo, int64_t hi,
               const Tensor& flat_range, bool to_flat) {
  ForEachOverlap(set, layout, lo, hi, [&](size_t t, int64_t a, int64_t b) {
    const int64_t start = a - layout.offset[t];
    const Tensor in_set = FlatSlice(set.tensors[t], start, start + (b - a));
    const Tensor in_flat = FlatSlice(flat_range, a - lo, b - lo);
    if (to_flat) {
      device->Copy(in_set, in_flat);
    } else {
      device->Copy(in_flat, in_set);
    }
  });
}

namespace {

std::map<std::string, Tensor> StateByName(const Optimizer& optimizer) {
  std::map<std::string, Tensor> state;
  for (auto& [name, t] : optimizer.State()) state[name] = t;
  return state;
}

// Each state tensor of `shard` with the whole one of its name, and the
// element its view starts at (State() lists a view's states together, in
// view order).
absl::Status ForEachStatePair(
    const Optimizer& shard, const std::vector<int64_t>& starts,
    const Optimizer& whole,
    const std::function<absl::Status(const Tensor& part,
                                     const Tensor& in_whole)>& fn) {
  const std::map<std::string, Tensor> all = StateByName(whole);
  const auto state = shard.State();
  if (state.empty()) return absl::OkStatus();
  // State() lists the same number of state tensors for every view.
  if (starts.empty() || state.size() % starts.size() != 0) {
    return absl::InternalError(
        absl::StrCat("a sharded optimizer of ", state.size(),
                     " state tensors over ", starts.size(), " views"));
  }
  const size_t per_view = state.size() / starts.size();
  for (size_t i = 0; i < state.size(); ++i) {
    auto it = all.find(state[i].first);
    if (it == all.end()) {
      return absl::InternalError(absl::StrCat(
          "optimizer state ", state[i].first, " has no whole tensor"));
    }
    const Tensor& part = state[i].second;
    const int64_t start = starts[i / per_view];
    RETURN_IF_ERROR(
        fn(part, FlatSlice(it->second, start, start + part.numel())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CopyStateToWhole(const Optimizer& shard,
                              const std::vector<int64_t>& starts,
                              const Optimizer& whole, Device* device,
                              bool shard_on_host) {
  return ForEachStatePair(shard, starts, whole,
                          [&](const Tensor& part, const Tensor& in_whole) {
                            if (shard_on_host)
                              return device->CopyFromHost(part.f32(), in_whole);
                            device->Copy(part, in_whole);
                            return absl::OkStatus();
                          });
}

absl::Status CopyStateFromWhole(const Optimizer& whole,
                                const std::vector<int64_t>& starts,
                                const Optimizer& shard, Device* device,
                                bool shard_on_host) {
  return ForEachStatePair(shard, starts, whole,
                          [&](const Tensor& part, const Tensor& in_whole) {
                            if (shard_on_host)
                              return device->CopyToHost(in_whole, part.f32());
                            device->Copy(in_whole, part);
                            return absl::OkStatus();
                          });
}

absl::Status OnHost(Device* device, const Tensor& t,
                    const std::function<absl::Status(float*, size_t)>& fn) {
  const auto n = static_cast<size_t>(t.numel());
  if (device->kind() == DeviceKind::kCpu) return fn(t.f32(), n);
  std::vector<float> host(n);
  RETURN_IF_ERROR(device->CopyToHost(t, host.data()));
  RETURN_IF_ERROR(fn(host.data(), n));
  return device->CopyFromHost(host.data(), t);
}

BucketReducer::BucketReducer(ProcessGroup* group, absl::Duration timeout,
                             bool threaded)
    : group_(group), timeout_(timeout) {
  if (threaded) thread_ = std::thread([this] { Loop(); });
}

BucketReducer::~BucketReducer() {
  {
    absl::MutexLock lock(&mu_);
    quit_ = true;
    queue_.clear();  // What was not started is dropped.
  }
  if (thread_.joinable()) thread_.join();
}

void BucketReducer::Launch(Kind kind, float* data, size_t n) {
  absl::MutexLock lock(&mu_);
  queue_.push_back({kind, data, n});
}

absl::Status BucketReducer::Run(const Job& job) {
  const absl::Time deadline = absl::Now() + timeout_;
  return job.kind == Kind::kAllReduce
             ? group_->AllReduce(job.data, job.n, deadline)
             : group_->ReduceScatterInPlace(job.data, job.n, deadline);
}

void BucketReducer::Loop() {
  for (;;) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](BucketReducer* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
            return r->quit_ || !r->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // quit_
      job = queue_.front();
      queue_.pop_front();
      ++running_;
    }
    const absl::Status status = Run(job);
    absl::MutexLock lock(&mu_);
    --running_;
    if (!status.ok() && error_.ok()) error_ = status;
    if (!error_.ok()) queue_.clear();
  }
}

absl::Status BucketReducer::Wait(absl::Time deadline) {
  if (!thread_.joinable()) {
    std::deque<Job> jobs;
    {
      absl::MutexLock lock(&mu_);
      jobs.swap(queue_);
    }
    for (const Job& job : jobs) RETURN_IF_ERROR(Run(job));
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  const bool done = mu_.AwaitWithDeadline(
      absl::Condition(
          +[](BucketReducer* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
            return r->queue_.empty() && r->running_ == 0;
          },
          this),
      deadline);
  if (!done) {
    return absl::DeadlineExceededError(
        absl::StrCat(group_->name(),
                     ": gradient buckets still reducing at "
                     "the deadline"));
  }
  absl::Status status = error_;
  error_ = absl::OkStatus();
  return status;
}

}  // namespace aqueduct
