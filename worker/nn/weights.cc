#include "worker/nn/weights.h"

#include <cstring>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace aqueduct {

namespace {

float Bf16ToF32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // Subnormal: normalise.
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The layer index of "layers.<i>.<...>", or -1.
int LayerIndexOf(const std::string& name) {
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  int index = -1;
  if (parts.size() >= 3 && parts[0] == "layers" &&
      absl::SimpleAtoi(parts[1], &index)) {
    return index;
  }
  return -1;
}

}  // namespace

absl::StatusOr<SafetensorsFile> ExportParameters(Device& device,
                                                 const ParameterSet& params) {
  SafetensorsFile file;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params.tensors[i];
    HostTensor h;
    h.dtype = t.dtype();
    h.shape = t.shape();
    h.data.resize(t.nbytes());
    RETURN_IF_ERROR(device.CopyToHost(t, h.data.data()));
    file.tensors[params.names[i]] = std::move(h);
  }
  file.metadata["format"] = "pt";
  file.metadata["producer"] = "aqueduct";
  return file;
}

absl::Status ImportParameters(const SafetensorsFile& file, Device& device,
                              const ParameterSet& params) {
  return ImportParameters(file, device, params, nullptr);
}

absl::Status ImportParameters(
    const SafetensorsFile& file, Device& device, const ParameterSet& params,
    const std::function<bool(const std::string&)>& skip) {
  std::set<std::string> wanted(params.names.begin(), params.names.end());
  for (const auto& [name, t] : file.tensors) {
    if (wanted.count(name)) continue;
    if (skip && skip(name)) continue;
    const int layer = LayerIndexOf(name);
    if (layer >= 0 && (layer < params.begin || layer >= params.end)) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name,
                     "' is not a parameter of the model (expected names "
                     "like 'layers.<i>.weight'; see docs/weights.md)"));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params.names[i];
    const Tensor& dst = params.tensors[i];
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' of shape ", dst.shape().ToString(),
                       " is missing"));
    }
    const HostTensor& src = it->second;
    if (src.shape != dst.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has shape ", src.shape.ToString(),
                       " but the model needs ", dst.shape().ToString()));
    }
    ASSIGN_OR_RETURN(const std::vector<float> values,
                     HostTensorValues(src, name));
    RETURN_IF_ERROR(device.CopyFromHost(values.data(), dst));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> HostTensorValues(const HostTensor& t,
                                                    const std::string& name) {
  const int64_t n = t.shape.numel();
  if (t.data.size() != static_cast<size_t>(n) * DTypeSize(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' holds ", t.data.size(), " bytes, not the ", n,
        " values of its shape ", t.shape.ToString()));
  }
  std::vector<float> values(n);
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(values.data(), t.data.data(), n * sizeof(float));
      break;
    case DType::kBF16:
    case DType::kF16:
      for (int64_t j = 0; j < n; ++j) {
        uint16_t h;
        std::memcpy(&h, t.data.data() + 2 * j, 2);
        values[j] = t.dtype == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has dtype ", DTypeName(t.dtype),
                       "; parameters must be F32, "
                       "BF16 or F16"));
  }
  return values;
}

absl::Status SaveParametersFile(const std::string& path, Device& device,
                                const ParameterSet& params) {
  ASSIGN_OR_RETURN(SafetensorsFile file, ExportParameters(device, params));
  return WriteSafetensorsFile(path, file);
}

absl::Status LoadParametersFile(const std::string& path, Device& device,
                                const ParameterSet& params) {
  ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(path));
  return Annotate(ImportParameters(file, device, params), path);
}

void TieFileCopies(const Model& model, SafetensorsFile* file) {
  for (const auto& [owner, copy] : model.ties()) {
    auto name = [&model](int l) {
      const Layer& layer = model.layer(l);
      return absl::StrCat("layers.", l, ".",
                          layer.Params()[WeightParam(layer)].name);
    };
    auto from = file->tensors.find(name(owner));
    auto to = file->tensors.find(name(copy));
    if (from != file->tensors.end() && to != file->tensors.end() &&
        from->second.shape == to->second.shape) {
      to->second = from->second;
    }
  }
}

}  // namespace aqueduct
