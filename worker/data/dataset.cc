#include "worker/data/dataset.h"

#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/device/device.h"
#include "common/status.h"
#include "pipeline/spec.h"
#include "worker/data/idx.h"
#include "worker/data/text.h"

namespace aqueduct {

namespace {

// The IDX files of a spec, with the fields that name them.
struct IdxPaths {
  std::string train_images, train_labels, test_images, test_labels;
  std::string train_images_field = "data.idx.train_images";
  std::string train_labels_field = "data.idx.train_labels";
  std::string test_images_field = "data.idx.test_images";
  std::string test_labels_field = "data.idx.test_labels";
};

// Fashion-MNIST's file names, gzip'd (as Debian ships them) or not.
std::string PickFile(const std::string& dir, const std::string& base,
                     const FileAccess& files) {
  const std::string gz = dir + "/" + base + ".gz";
  absl::StatusOr<OpenedFile> f =
      OpenRegularFile(gz, files.data, "data.fashion_mnist_dir");
  return absl::IsNotFound(f.status()) ? dir + "/" + base : gz;
}

absl::StatusOr<IdxPaths> PathsOf(const DataSpec& spec,
                                 const FileAccess& files) {
  IdxPaths p;
  if (spec.has_idx()) {
    const IdxData& idx = spec.idx();
    if (idx.train_images().empty() || idx.train_labels().empty()) {
      return absl::InvalidArgumentError(
          "data.idx.train_images and data.idx.train_labels are required");
    }
    if (idx.test_images().empty() != idx.test_labels().empty()) {
      return absl::InvalidArgumentError(
          "data.idx.test_images and data.idx.test_labels must be set "
          "together");
    }
    p = {idx.train_images(), idx.train_labels(), idx.test_images(),
         idx.test_labels()};
    return p;
  }
  const std::string& dir = spec.fashion_mnist_dir();
  // The directory first: outside the roots, nothing in it is looked at.
  RETURN_IF_ERROR(files.data.Resolve(dir, "data.fashion_mnist_dir").status());
  p.train_images = PickFile(dir, "train-images-idx3-ubyte", files);
  p.train_labels = PickFile(dir, "train-labels-idx1-ubyte", files);
  p.test_images = PickFile(dir, "t10k-images-idx3-ubyte", files);
  p.test_labels = PickFile(dir, "t10k-labels-idx1-ubyte", files);
  p.train_images_field = p.train_labels_field = p.test_images_field =
      p.test_labels_field = "data.fashion_mnist_dir";
  return p;
}

absl::StatusOr<Shape> ImageSampleShape(const IdxArray& header,
                                       const std::string& path) {
  std::vector<int64_t> dims(header.dims.begin() + 1, header.dims.end());
  if (dims.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": an image file needs at least 2 dimensions"));
  }
  // [N, H, W] images get a channel dimension: [1, H, W].
  if (dims.size() == 2) dims.insert(dims.begin(), 1);
  return Shape(std::move(dims));
}

absl::StatusOr<Dataset> LoadIdxSplit(const IdxPaths& paths, bool test,
                                     const DataSpec& spec, int64_t limit,
                                     const FileAccess& files) {
  const std::string& images_path =
      test ? paths.test_images : paths.train_images;
  const std::string& labels_path =
      test ? paths.test_labels : paths.train_labels;
  ASSIGN_OR_RETURN(
      IdxArray images,
      ReadIdxFile(images_path, files,
                  test ? paths.test_images_field : paths.train_images_field));
  ASSIGN_OR_RETURN(
      IdxArray labels,
      ReadIdxFile(labels_path, files,
                  test ? paths.test_labels_field : paths.train_labels_field));
  if (labels.dims.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        labels_path, ": a label file must have 1 dimension, found ",
        labels.dims.size()));
  }
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, " holds ", images.dims[0], " samples but ",
                     labels_path, " holds ", labels.dims[0], " labels"));
  }
  Dataset d;
  ASSIGN_OR_RETURN(d.sample_shape, ImageSampleShape(images, images_path));
  d.size = images.dims[0];
  if (limit > 0 && limit < d.size) d.size = limit;
  const int64_t per = d.sample_shape.numel();
  const float mean = spec.mean();
  const float inv_std = spec.has_std() ? 1.0f / spec.std() : 1.0f;
  d.inputs.resize(d.size * per);
  for (int64_t i = 0; i < d.size * per; ++i) {
    d.inputs[i] = (images.data[i] * (1.0f / 255.0f) - mean) * inv_std;
  }
  d.labels.resize(d.size);
  int max_label = 0;
  for (int64_t i = 0; i < d.size; ++i) {
    d.labels[i] = labels.data[i];
    max_label = std::max(max_label, static_cast<int>(labels.data[i]));
  }
  d.num_classes = max_label + 1;
  return d;
}

// Gaussian-ish inputs and labels from a random linear teacher.
Dataset MakeSynthetic(const SyntheticData& s, int64_t size, uint64_t stream) {
  Dataset d;
  d.sample_shape = Shape(
      std::vector<int64_t>(s.sample_shape().begin(), s.sample_shape().end()));
  d.size = size;
  d.num_classes = static_cast<int>(s.num_classes());
  const int64_t per = d.sample_shape.numel();
  d.inputs.resize(size * per);
  const uint64_t key = s.seed() * 0x2545F4914F6CDD1Dull + stream;
  for (int64_t i = 0; i < size * per; ++i) {
    // Sum of three uniforms, centred: roughly normal with variance 1/4.
    float v = 0;
    for (int k = 0; k < 3; ++k) {
      v += DropoutUniform(key, static_cast<uint64_t>(i) * 3 + k);
    }
    d.inputs[i] = (v - 1.5f) * 2.0f;
  }
  std::vector<float> teacher(d.num_classes * per);
  const uint64_t teacher_key = s.seed() * 0x9E3779B97F4A7C15ull + 7;
  for (size_t i = 0; i < teacher.size(); ++i) {
    teacher[i] = DropoutUniform(teacher_key, i) - 0.5f;
  }
  d.labels.resize(size);
  for (int64_t n = 0; n < size; ++n) {
    int best = 0;
    float best_score = -1e30f;
    for (int c = 0; c < d.num_classes; ++c) {
      float score = 0;
      const float* x = &d.inputs[n * per];
      const float* w = &teacher[c * per];
      for (int64_t j = 0; j < per; ++j) score += x[j] * w[j];
      if (score > best_score) {
        best_score = score;
        best = c;
      }
    }
    d.labels[n] = best;
  }
  return d;
}

}  // namespace

absl::StatusOr<DataInfo> DescribeData(const DataSpec& spec,
                                      const FileAccess& files) {
  RETURN_IF_ERROR(ValidateDataSpec(spec));
  DataInfo info;
  switch (spec.source_case()) {
    case DataSpec::kSynthetic: {
      const SyntheticData& s = spec.synthetic();
      info.sample_shape = Shape(std::vector<int64_t>(s.sample_shape().begin(),
                                                     s.sample_shape().end()));
      info.num_classes = static_cast<int>(s.num_classes());
      info.train_samples = s.train_samples();
      if (spec.train_limit() > 0) {
        info.train_samples = std::min(info.train_samples, spec.train_limit());
      }
      return info;
    }
    case DataSpec::kFashionMnistDir:
    case DataSpec::kIdx: {
      ASSIGN_OR_RETURN(IdxPaths paths, PathsOf(spec, files));
      ASSIGN_OR_RETURN(IdxArray header,
                       ReadIdxFile(paths.train_images, files,
                                   paths.train_images_field, true));
      ASSIGN_OR_RETURN(info.sample_shape,
                       ImageSampleShape(header, paths.train_images));
      info.train_samples = header.dims[0];
      if (spec.train_limit() > 0) {
        info.train_samples = std::min(info.train_samples, spec.train_limit());
      }
      // Labels are small; reading them gives the class count.
      ASSIGN_OR_RETURN(IdxArray labels, ReadIdxFile(paths.train_labels, files,
                                                    paths.train_labels_field));
      int max_label = 0;
      for (uint8_t l : labels.data) max_label = std::max<int>(max_label, l);
      info.num_classes = max_label + 1;
      return info;
    }
    case DataSpec::kText:
      return DescribeTextData(spec.text(), files);
    case DataSpec::SOURCE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "data has no source (set data.text, data.fashion_mnist_dir, data.idx "
      "or data.synthetic)");
}

absl::StatusOr<DataSplits> LoadData(const DataSpec& spec,
                                    const FileAccess& files) {
  RETURN_IF_ERROR(ValidateDataSpec(spec));
  DataSplits splits;
  if (spec.has_synthetic()) {
    const SyntheticData& s = spec.synthetic();
    int64_t train = s.train_samples();
    if (spec.train_limit() > 0) train = std::min(train, spec.train_limit());
    splits.train = MakeSynthetic(s, train, 1);
    if (s.test_samples() > 0) {
      int64_t test = s.test_samples();
      if (spec.test_limit() > 0) test = std::min(test, spec.test_limit());
      splits.test = MakeSynthetic(s, test, 2);
    }
    return splits;
  }
  if (spec.has_text()) return LoadTextData(spec.text(), files);
  if (spec.source_case() == DataSpec::SOURCE_NOT_SET) {
    return DescribeData(spec, files).status();
  }
  ASSIGN_OR_RETURN(IdxPaths paths, PathsOf(spec, files));
  ASSIGN_OR_RETURN(splits.train, LoadIdxSplit(paths, /*test=*/false, spec,
                                              spec.train_limit(), files));
  if (!paths.test_images.empty()) {
    ASSIGN_OR_RETURN(Dataset test, LoadIdxSplit(paths, /*test=*/true, spec,
                                                spec.test_limit(), files));
    if (test.sample_shape != splits.train.sample_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          paths.test_images, ": test samples of shape ",
          test.sample_shape.ToString(), " differ from training samples ",
          splits.train.sample_shape.ToString()));
    }
    test.num_classes = splits.train.num_classes;
    for (int64_t i = 0; i < test.size; ++i) {
      if (test.labels[i] >= splits.train.num_classes) {
        return absl::InvalidArgumentError(
            absl::StrCat(paths.test_labels, ": label ", test.labels[i],
                         " of sample ", i, " is not among the training set's ",
                         splits.train.num_classes, " classes"));
      }
    }
    splits.test = std::move(test);
  }
  return splits;
}

EpochSampler::EpochSampler(int64_t dataset_size, int64_t batch_size,
                           bool shuffle, uint64_t seed)
    : size_(dataset_size),
      batch_size_(batch_size),
      shuffle_(shuffle),
      seed_(seed),
      batches_per_epoch_(batch_size > 0 ? dataset_size / batch_size : 0) {}

EpochSampler EpochSampler::For(const Dataset& data, int64_t batch_size,
                               bool shuffle, uint64_t seed) {
  EpochSampler sampler(data.size, batch_size, shuffle, seed);
  if (data.is_text()) {
    sampler.random_windows_ = true;
    sampler.batches_per_epoch_ =
        batch_size > 0 ? data.num_tokens() / data.context / batch_size : 0;
  }
  return sampler;
}

absl::Span<const int64_t> EpochSampler::Batch(int64_t minibatch) {
  if (random_windows_) {
    if (minibatch != cached_epoch_) {
      order_.resize(batch_size_);
      for (int64_t r = 0; r < batch_size_; ++r) {
        order_[r] = TextWindowStart(seed_, static_cast<uint64_t>(minibatch),
                                    static_cast<uint64_t>(r), size_);
      }
      cached_epoch_ = minibatch;
    }
    return absl::MakeConstSpan(order_);
  }
  const int64_t epoch = minibatch / batches_per_epoch_;
  const int64_t index = minibatch % batches_per_epoch_;
  if (epoch != cached_epoch_) {
    order_.resize(size_);
    std::iota(order_.begin(), order_.end(), 0);
    if (shuffle_) {
      // Fisher-Yates with a counter-based draw: the same on every platform.
      const uint64_t key =
          seed_ * 0xD1B54A32D192ED03ull + static_cast<uint64_t>(epoch) + 1;
      for (int64_t i = size_ - 1; i > 0; --i) {
        const int64_t j = static_cast<int64_t>(
            DropoutUniform(key, static_cast<uint64_t>(i)) * (i + 1));
        std::swap(order_[i], order_[std::min(j, i)]);
      }
    }
    cached_epoch_ = epoch;
  }
  return absl::MakeConstSpan(order_).subspan(index * batch_size_, batch_size_);
}

void GatherBatch(const Dataset& data, absl::Span<const int64_t> indices,
                 float* inputs, int32_t* labels) {
  if (data.is_text()) {
    const int64_t context = data.context;
    for (size_t i = 0; i < indices.size(); ++i) {
      const int64_t start = indices[i] * data.stride;
      float* x = inputs + i * context;
      int32_t* y = labels + i * context;
      if (data.mapped.data == nullptr) {
        const int32_t* window = data.tokens.data() + start;
        for (int64_t t = 0; t < context; ++t) x[t] = window[t];
        std::memcpy(y, window + 1, context * sizeof(int32_t));
        continue;
      }
      for (int64_t t = 0; t < context; ++t) {
        x[t] = static_cast<float>(data.mapped[start + t]);
        y[t] = data.mapped[start + t + 1];
      }
    }
    return;
  }
  const int64_t per = data.sample_shape.numel();
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(inputs + i * per, data.inputs.data() + indices[i] * per,
                per * sizeof(float));
    labels[i] = data.labels[indices[i]];
  }
}

absl::Status LoadBatch(const Dataset& data, absl::Span<const int64_t> indices,
                       Device& device, Tensor& inputs, Tensor& labels,
                       BatchStaging& staging) {
  const int64_t rows = static_cast<int64_t>(indices.size());
  const int64_t label_count = rows * data.labels_per_sample;
  if (inputs.numel() != rows * data.sample_shape.numel() ||
      labels.numel() != label_count) {
    return absl::InternalError(absl::StrCat(
        "a batch of ", rows, " samples of ", data.sample_shape.ToString(),
        data.labels_per_sample == 1
            ? std::string()
            : absl::StrCat(" with ", data.labels_per_sample, " labels each"),
        " does not fit tensors of ", inputs.shape().ToString(), " and ",
        labels.shape().ToString()));
  }
  if (device.kind() == DeviceKind::kCpu) {
    GatherBatch(data, indices, inputs.f32(), labels.i32());
    return absl::OkStatus();
  }
  staging.inputs.resize(static_cast<size_t>(inputs.numel()));
  staging.labels.resize(static_cast<size_t>(label_count));
  GatherBatch(data, indices, staging.inputs.data(), staging.labels.data());
  RETURN_IF_ERROR(device.CopyFromHost(staging.inputs.data(), inputs));
  return device.CopyFromHost(staging.labels.data(), labels);
}

}  // namespace aqueduct
