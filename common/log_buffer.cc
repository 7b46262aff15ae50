#include "common/log_buffer.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "spdlog/sinks/base_sink.h"

namespace aqueduct {

namespace {

// The context of this thread. A plain thread_local: set and read only by
// its own thread.
struct ThreadJob {
  std::string job_id;
  int stage = -1;
};
ThreadJob& Current() {
  thread_local ThreadJob current;
  return current;
}

// A line of `text` cut to `max` bytes, not in the middle of a UTF-8
// sequence.
std::string Capped(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  return text.substr(0, end) + "...";
}

// Copies the formatted payload of lines logged by threads with a job
// context. spdlog's base_sink serialises calls with its mutex.
class JobLogSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit JobLogSink(JobLogBuffer* buffer) : buffer_(buffer) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const ThreadJob& ctx = Current();
    if (ctx.job_id.empty()) return;
    const auto level = spdlog::level::to_string_view(msg.level);
    const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           msg.time.time_since_epoch())
                           .count();
    buffer_->Add(ctx.job_id, ctx.stage, std::string(level.data(), level.size()),
                 ms, std::string(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  JobLogBuffer* const buffer_;
};

}  // namespace

JobLogBuffer::JobLogBuffer(JobLogBufferOptions options)
    : options_(std::move(options)) {}

void JobLogBuffer::Add(const std::string& job_id, int stage,
                       const std::string& level, int64_t time_ms,
                       const std::string& text) {
  absl::MutexLock lock(&mu_);
  if (rings_.count(job_id) == 0 && rings_.size() >= options_.max_jobs) {
    // Forget the job written least recently: its run is long over.
    auto oldest = rings_.begin();
    for (auto it = rings_.begin(); it != rings_.end(); ++it) {
      if (it->second.touched < oldest->second.touched) oldest = it;
    }
    rings_.erase(oldest);
  }
  Ring& ring = rings_[job_id];
  ring.touched = ++adds_;
  v1::LogLine& line = ring.lines.emplace_back();
  line.set_time_ms(time_ms);
  line.set_level(level);
  line.set_stage(stage);
  line.set_text(Capped(text, options_.max_line_bytes));
  while (ring.lines.size() > options_.max_lines_per_job) {
    ring.lines.pop_front();
    ++ring.dropped;
  }
}

std::vector<v1::LogLine> JobLogBuffer::Take(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::LogLine> out;
  auto it = rings_.find(job_id);
  if (it == rings_.end()) return out;
  Ring& ring = it->second;
  if (ring.dropped > 0 && !ring.lines.empty()) {
    v1::LogLine& note = out.emplace_back();
    note.set_time_ms(ring.lines.front().time_ms());
    note.set_level("warn");
    note.set_stage(ring.lines.front().stage());
    note.set_text(absl::StrCat(
        ring.dropped, " earlier line(s) dropped: more than ",
        options_.max_lines_per_job, " waited for a progress report"));
    ring.dropped = 0;
  }
  out.insert(out.end(), std::make_move_iterator(ring.lines.begin()),
             std::make_move_iterator(ring.lines.end()));
  ring.lines.clear();
  return out;
}

size_t JobLogBuffer::Pending(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = rings_.find(job_id);
  return it == rings_.end() ? 0 : it->second.lines.size();
}

ScopedJobLogContext::ScopedJobLogContext(std::string job_id, int stage)
    : previous_job_(std::move(Current().job_id)),
      previous_stage_(Current().stage) {
  Current().job_id = std::move(job_id);
  Current().stage = stage;
}

ScopedJobLogContext::~ScopedJobLogContext() {
  Current().job_id = std::move(previous_job_);
  Current().stage = previous_stage_;
}

const std::string& CurrentLogJob() { return Current().job_id; }
int CurrentLogStage() { return Current().stage; }

std::shared_ptr<spdlog::sinks::sink> NewJobLogSink(JobLogBuffer* buffer) {
  return std::make_shared<JobLogSink>(buffer);
}

void InstallJobLogSink(JobLogBuffer* buffer) {
  logging::Get()->sinks().push_back(NewJobLogSink(buffer));
}

}  // namespace aqueduct
