// ModelStore: where the coordinator keeps the jobs' trained models, one
// safetensors file per job, <dir>/<job id>.safetensors (dir is
// <state_dir>/models in the daemon).
//
// Receiving (UploadModel from the output stage's worker): BeginUpload opens
// <job id>.safetensors.part; every chunk must start where the previous one
// ended and stay within the declared size; Commit checks the size and the
// CRC-32 (zlib) declared with the upload, syncs the file, renames it into
// place and syncs the directory. An upload that fails, or is dropped before
// Commit, removes its .part; .part files a previous process left are
// removed when the store opens. One upload per job at a time: a second one
// for the same job is ABORTED while the first is in progress.
//
// Reading (GetModel): Read streams a file in chunks, each carrying the
// file's size and CRC-32. The CRC of a file this process committed is known;
// any other file's is computed by a first pass over it (and remembered
// while the file is unchanged). A file that changes while it is streamed is
// DATA_LOSS.
//
// Files are accessed with POSIX calls directly.
//
// Thread-safety: ModelStore is thread-safe. A ModelUpload is used by one
// thread at a time; the store must outlive it.
#ifndef AQUEDUCT_COORDINATOR_MODEL_STORE_H_
#define AQUEDUCT_COORDINATOR_MODEL_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/control.pb.h"

namespace aqueduct {

struct ModelStoreOptions {
  // Where the models are kept; created (mode 0700) if missing, but not its
  // parents.
  std::string dir;
  // The largest model accepted.
  int64_t max_bytes = int64_t{64} << 30;
  // The size of the chunks Read sends.
  int64_t chunk_bytes = int64_t{1} << 20;
};

// A model made durable by ModelUpload::Commit.
struct StoredModel {
  std::string path;
  int64_t bytes = 0;
  uint32_t crc32 = 0;
};

class ModelStore;

// One model being received. Not thread-safe. Destroying it before a
// successful Commit removes its .part file and lets another upload of the
// job begin.
class ModelUpload {
 public:
  ~ModelUpload();
  ModelUpload(const ModelUpload&) = delete;
  ModelUpload& operator=(const ModelUpload&) = delete;

  // Writes `data`, which must start at `offset`, the number of bytes
  // received so far (INVALID_ARGUMENT otherwise, and for bytes past the
  // declared size). UNAVAILABLE naming the file when the write fails. After
  // any error the upload is over: later calls fail.
  absl::Status Append(int64_t offset, absl::string_view data);
  // Checks the size (DATA_LOSS when bytes are missing) and the CRC-32
  // (DATA_LOSS when it differs), then makes the model durable at its path,
  // replacing the job's previous model if any. UNAVAILABLE naming the file
  // when a sync or the rename fails.
  absl::StatusOr<StoredModel> Commit();

  int64_t received() const { return received_; }

 private:
  friend class ModelStore;
  ModelUpload(ModelStore* store, std::string job_id, std::string path, int fd,
              int64_t total_bytes, uint32_t crc32);
  // Closes and removes the .part file; the upload is over.
  void Abandon();
  absl::Status Fail(absl::Status status);

  ModelStore* const store_;
  const std::string job_id_;
  const std::string path_;  // The final path; the .part is path_ + ".part".
  int fd_;                  // -1 once closed.
  const int64_t total_bytes_;
  const uint32_t declared_crc32_;
  int64_t received_ = 0;
  uint32_t crc32_ = 0;
  bool over_ = false;
};

class ModelStore {
 public:
  // Opens (creating if missing) options.dir and removes the .part files
  // left there. UNAVAILABLE naming the directory when it cannot be created.
  static absl::StatusOr<std::unique_ptr<ModelStore>> Open(
      ModelStoreOptions options);

  // Begins receiving the model of `job_id`: `total_bytes` with CRC-32
  // `crc32`. INVALID_ARGUMENT for a job id that is not a plain file name or
  // an empty model, RESOURCE_EXHAUSTED for one over options.max_bytes,
  // ABORTED while another upload of the job is in progress, UNAVAILABLE
  // naming the file when it cannot be created.
  absl::StatusOr<std::unique_ptr<ModelUpload>> BeginUpload(
      const std::string& job_id, int64_t total_bytes, uint32_t crc32);

  // Streams the model file at `path` (any path: a job's recorded model) to
  // `write` in chunks of options.chunk_bytes, in order, each with the
  // file's size and CRC-32, until the end of the file (OK), `write`
  // returns false or `cancelled` returns true (CANCELLED). NOT_FOUND or
  // UNAVAILABLE naming the file when it cannot be read; DATA_LOSS when it
  // changed while it was read.
  absl::Status Read(const std::string& path,
                    const std::function<bool()>& cancelled,
                    const std::function<bool(const v1::ModelChunk&)>& write);

  // Where the model of `job_id` is kept.
  std::string PathFor(const std::string& job_id) const;
  const ModelStoreOptions& options() const { return options_; }

 private:
  // What identifies one version of a file, and its CRC-32.
  struct FileCrc {
    int64_t bytes = 0;
    int64_t mtime_ns = 0;
    uint64_t inode = 0;
    uint32_t crc32 = 0;
  };
  friend class ModelUpload;

  explicit ModelStore(ModelStoreOptions options)
      : options_(std::move(options)) {}
  void EndUpload(const std::string& job_id);
  void RememberCrc(const std::string& path, uint32_t crc32);
  // The CRC-32 of the open file `fd` at `path`, described by `now`
  // (bytes, mtime, inode): remembered, or computed by reading it.
  absl::StatusOr<uint32_t> CrcOf(const std::string& path, int fd, FileCrc now);

  const ModelStoreOptions options_;
  absl::Mutex mu_;
  std::set<std::string> uploading_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, FileCrc> crcs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_MODEL_STORE_H_
