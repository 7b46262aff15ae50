// SentencePiece subword models through Debian's sentencepiece tools
// (spm_train, spm_encode, spm_decode, spm_export_vocab), run as child
// processes on files. Not Debian's libsentencepiece: that library carries
// and exports its own copy of protobuf-lite, whose symbols take the place
// of libprotobuf's in a process that links both, and such a process
// crashes while starting (protobuf's descriptor registration).
//
// Models are trained with byte fallback (every byte of any text has an
// id) and without normalisation, so Decode(Encode(text)) == text. The
// tools encode line by line: a newline is the id of the byte piece
// <0x0A>, put between lines here.
//
// Thread-safety: a loaded Pieces is immutable; Encode and Decode may run
// concurrently (each in temporary files of its own). Each tool run has a
// deadline.
#ifndef AQUEDUCT_WORKER_DATA_SENTENCEPIECE_H_
#define AQUEDUCT_WORKER_DATA_SENTENCEPIECE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace aqueduct {
namespace spm {

class Pieces {
 public:
  // The model at `path` (a .model file). FAILED_PRECONDITION when the tools
  // are not installed; INVALID_ARGUMENT naming the path when it is not a
  // SentencePiece model with a <0x0A> byte piece.
  static absl::StatusOr<std::unique_ptr<Pieces>> Load(const std::string& path);
  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }
  const std::string& path() const { return path_; }
  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const;
  // The ids of the text file `path`, newlines included (for `aq tokenize`,
  // without a copy of the file).
  absl::StatusOr<std::vector<int32_t>> EncodeFile(
      const std::string& path) const;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

 private:
  std::string path_;
  std::vector<std::string> pieces_;  // By id.
  int32_t newline_ = -1;             // The id of <0x0A>.
};

// Trains a model on the text `files` into `prefix`.model (and
// `prefix`.vocab) with spm_train: `vocab_size` pieces of `model_type`
// ("bpe" or "unigram"), byte fallback, no normalisation. INVALID_ARGUMENT
// with the tool's message when it fails.
absl::Status Train(const std::vector<std::string>& files,
                   const std::string& prefix, int64_t vocab_size,
                   const std::string& model_type, int threads);

}  // namespace spm
}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_DATA_SENTENCEPIECE_H_
