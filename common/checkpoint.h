// Checkpoint files on disk: each stage writes its layers (parameters and
// optimizer state) as one safetensors file in a version directory,
// <dir>/<job_id>/v<version>/, and the coordinator commits the checkpoint by
// writing manifest.json there once every file is durable. A version
// directory without a manifest, or whose files do not match it (size,
// CRC-32), is not a checkpoint.
//
// Every write is durable: a temporary file in the same directory, fsync'd,
// renamed into place, then the directory fsync'd; the manifest's rename is
// the commit point.
//
// Every function takes the roots its daemon allows checkpoints under (the
// worker's and the coordinator's --checkpoint_root; PathRoots::Anywhere()
// for `aq`): a directory or manifest outside them is refused with
// PERMISSION_DENIED naming the path and the flag, before anything is read,
// written or removed. Files are opened as common/file_system.h's
// OpenRegularFile does (regular files only, no symbolic link as the last
// component, sizes checked before reading) and no error quotes their bytes.
//
// Thread-safety: stateless functions over the file system; thread-safe.
// Concurrent writers of the same path are the caller's concern.
#ifndef AQUEDUCT_COMMON_CHECKPOINT_H_
#define AQUEDUCT_COMMON_CHECKPOINT_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/file_system.h"
#include "common/safetensors.h"
#include "proto/control.pb.h"

namespace aqueduct {

// The name of the manifest in a version directory.
inline constexpr char kManifestFileName[] = "manifest.json";

// <dir>/<job_id>
std::string CheckpointJobDir(absl::string_view dir, absl::string_view job_id);
// <dir>/<job_id>/v<version, zero-padded to 8 digits>, e.g.
// /ck/job-1/v00000100.
std::string CheckpointVersionDir(absl::string_view dir,
                                 absl::string_view job_id, int64_t version);
// "stage-<s>-a<attempt>.safetensors"
std::string StageFileName(int stage, int attempt);
// CRC-32 (zlib's crc32) of bytes.
uint32_t Crc32(absl::string_view bytes);

// Writes `file` (serialized with SerializeSafetensors) as
// <version_dir>/<name> (mode 0600): creates the directories as needed (mode
// 0700, like mkdir -p), writes a temporary file in the same directory,
// fsyncs it,
// renames it into place, fsyncs the directory. Returns the CheckpointFile
// with name, stage, layer_begin, layer_end, bytes and crc32 filled.
// INVALID_ARGUMENT for a `name` that is not a plain file name, a bad layer
// range or a file that does not serialise; UNAVAILABLE for I/O errors (such as
// ENOSPC, with strerror); PERMISSION_DENIED for a version_dir outside
// `roots`. Errors name the path. A failure leaves no temporary file behind.
absl::StatusOr<v1::CheckpointFile> WriteCheckpointFile(
    const PathRoots& roots, const std::string& version_dir,
    const std::string& name, const SafetensorsFile& file, int stage,
    int layer_begin, int layer_end);

// Commits a checkpoint: writes m as <m.dir()>/manifest.json (protobuf JSON,
// pretty, with the proto field names) with the same durability (temp file,
// fsync, rename, fsync dir). The commit point is the rename.
// INVALID_ARGUMENT when m.dir() is empty; PERMISSION_DENIED when it is
// outside `roots`; UNAVAILABLE for I/O errors.
absl::Status CommitManifest(const PathRoots& roots,
                            const v1::CheckpointManifest& m);

// Reads a manifest, given a version directory or the path of its
// manifest.json. NOT_FOUND when missing; PERMISSION_DENIED outside `roots`;
// DATA_LOSS when it does not parse (or is not a regular file of at most
// kMaxManifestBytes); UNAVAILABLE for other I/O errors; errors name the
// path. Under roots, `dir` is set to the real path of the directory it was
// read from; with PathRoots::Anywhere(), only when the manifest's `dir` is
// not that directory (the checkpoint was moved or copied), as given.
absl::StatusOr<v1::CheckpointManifest> ReadManifest(const PathRoots& roots,
                                                    const std::string& path);
// The largest manifest.json read.
inline constexpr int64_t kMaxManifestBytes = int64_t{64} << 20;

// Verifies every file of the manifest: present, size and CRC-32 as
// recorded. DATA_LOSS naming the file and what differs. Also
// FAILED_PRECONDITION when the files do not cover layers
// [0, m.num_layers()) (every layer in exactly one file: the manifest lists
// the stage files of replica 0 only); PERMISSION_DENIED for an m.dir()
// outside `roots`. Reads every file once, in chunks.
absl::Status VerifyCheckpoint(const PathRoots& roots,
                              const v1::CheckpointManifest& m);

// The tensors of layers [begin, end): every tensor named "layers.<i>.<...>"
// with begin <= i < end (and i in its file's recorded range), from the
// manifest's files whose layer range overlaps [begin, end); each file read
// is checked (its size before it is read, then its CRC-32) before it is
// parsed (DATA_LOSS naming it otherwise). The metadata of the first file
// read is kept. FAILED_PRECONDITION if the files do not cover [begin, end)
// (every layer in exactly one file); INVALID_ARGUMENT if begin < 0 or end <
// begin; PERMISSION_DENIED for an m.dir() outside `roots`; CANCELLED when
// *stop (if set) becomes true while reading.
absl::StatusOr<SafetensorsFile> LoadCheckpointLayers(
    const PathRoots& roots, const v1::CheckpointManifest& m, int begin, int end,
    const std::atomic<bool>* stop = nullptr);

// Reads and parses the safetensors file `path` under `roots` (init_weights,
// a stage's checkpoint file): a regular file whose 8-byte header length
// fits its size, checked before the rest is read; INVALID_ARGUMENT "<field>:
// '<path>' is not a safetensors file ..." otherwise, with
// OpenRegularFile's and ReadOpenedFile's errors (CANCELLED once *stop is
// true). Errors name `field` and the path, never the file's bytes.
absl::StatusOr<SafetensorsFile> ReadSafetensorsUnder(
    const PathRoots& roots, const std::string& path, absl::string_view field,
    const std::atomic<bool>* stop = nullptr);

// Committed checkpoints under a job directory (version dirs v<digits> whose
// manifest reads, records the same version and verifies), oldest first.
// `warnings` (may be null) gets one line for every version dir that is
// ignored, saying why (no manifest: the commit never happened; or the
// error). A missing job directory has no checkpoints; one outside `roots`
// has none either (a warning says so).
std::vector<v1::CheckpointManifest> ScanCheckpoints(
    const PathRoots& roots, const std::string& job_dir,
    std::vector<std::string>* warnings);

// Removes the version directories v<digits> under job_dir whose version is
// not in `keep` and is at most `newest` (directories of later versions are
// checkpoints still being written, and are left alone): their regular files
// (manifest.json first, so that a crash part-way leaves an uncommitted
// directory), then the directory. Touches nothing else. Missing job_dir is
// OK. Carries on past a directory it cannot remove (say one holding a
// subdirectory) and returns the first error (UNAVAILABLE or
// FAILED_PRECONDITION, naming the path). A job_dir outside `roots` is
// PERMISSION_DENIED, and nothing is removed.
absl::Status PruneCheckpoints(
    const PathRoots& roots, const std::string& job_dir,
    const std::set<int64_t>& keep,
    int64_t newest = std::numeric_limits<int64_t>::max());

// Removes the regular files in m.dir() other than manifest.json and the
// manifest's files (stale files of an earlier attempt or a failed write).
// UNAVAILABLE naming the path on an error (NOT_FOUND for a missing m.dir(),
// PERMISSION_DENIED for one outside `roots`).
absl::Status RemoveStrayFiles(const PathRoots& roots,
                              const v1::CheckpointManifest& m);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_CHECKPOINT_H_
