#include "common/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace aqueduct {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // As the reference reader.

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

absl::StatusOr<int64_t> AsCount(const google::protobuf::Value& v,
                                const std::string& what) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue ||
      v.number_value() < 0 || v.number_value() > 9.007199254740992e15 ||
      std::floor(v.number_value()) != v.number_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: ", what, " is not a non-negative integer"));
  }
  return static_cast<int64_t>(v.number_value());
}

// The header length: the first 8 bytes, little-endian, checked against the
// file's size and the limit.
absl::StatusOr<uint64_t> HeaderLength(const std::string& bytes) {
  if (bytes.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: file of ", bytes.size(),
                     " bytes is shorter than the 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) {
    n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  }
  if (n > bytes.size() - 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: header length ", n,
        " is larger than the file's remaining ", bytes.size() - 8, " bytes"));
  }
  if (n > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: header length ", n, " exceeds the limit of ",
                     kMaxHeaderBytes));
  }
  return n;
}

// Copies the __metadata__ object (string values only) into `metadata`.
absl::Status ParseMetadata(const google::protobuf::Value& value,
                           std::map<std::string, std::string>* metadata) {
  if (value.kind_case() != google::protobuf::Value::kStructValue) {
    return absl::InvalidArgumentError(
        "safetensors: __metadata__ is not an object");
  }
  for (const auto& [k, v] : value.struct_value().fields()) {
    if (v.kind_case() != google::protobuf::Value::kStringValue) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: __metadata__ value of '", k, "' is not a string"));
    }
    (*metadata)[k] = v.string_value();
  }
  return absl::OkStatus();
}

// The dimensions of a tensor's "shape" entry. The product of its non-zero
// dimensions, in bytes of `dtype`, must fit in an int64, so that no
// product of them (Shape::numel, in any order, zeros or not) overflows:
// each dimension alone may be up to 2^53.
absl::StatusOr<Shape> ParseShape(const google::protobuf::Value& shape,
                                 DType dtype, const std::string& what) {
  if (shape.kind_case() != google::protobuf::Value::kListValue) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: ", what, ": shape is not a list"));
  }
  std::vector<int64_t> dims;
  uint64_t bytes = DTypeSize(dtype);
  constexpr uint64_t kMaxBytes = std::numeric_limits<int64_t>::max();
  for (const auto& d : shape.list_value().values()) {
    ASSIGN_OR_RETURN(int64_t dim, AsCount(d, what + " shape entry"));
    if (dim > 0 && static_cast<uint64_t>(dim) > kMaxBytes / bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: ", what, ": shape entry ", dims.size(), " (", dim,
          ") makes the tensor larger than ", kMaxBytes, " bytes"));
    }
    if (dim > 0) bytes *= static_cast<uint64_t>(dim);
    dims.push_back(dim);
  }
  return Shape(std::move(dims));
}

// A tensor's [begin, end) "data_offsets", checked against the data's size
// and the bytes that dtype and shape of `t` need.
absl::StatusOr<std::pair<int64_t, int64_t>> ParseDataOffsets(
    const google::protobuf::Value& offsets, const std::string& what,
    const HostTensor& t, uint64_t data_size) {
  if (offsets.kind_case() != google::protobuf::Value::kListValue ||
      offsets.list_value().values_size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: ", what, ": data_offsets is not [begin, end]"));
  }
  ASSIGN_OR_RETURN(int64_t begin, AsCount(offsets.list_value().values(0),
                                          what + " data_offsets[0]"));
  ASSIGN_OR_RETURN(int64_t end, AsCount(offsets.list_value().values(1),
                                        what + " data_offsets[1]"));
  if (begin > end || static_cast<uint64_t>(end) > data_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: ", what, ": data_offsets [", begin, ", ",
                     end, "] are outside the ", data_size, " data bytes"));
  }
  const uint64_t want = t.shape.numel() * DTypeSize(t.dtype);
  if (static_cast<uint64_t>(end - begin) != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: ", what, ": data_offsets [", begin, ", ", end, "] hold ",
        end - begin, " bytes but ", DTypeName(t.dtype), " ", t.shape.ToString(),
        " needs ", want));
  }
  return std::make_pair(begin, end);
}

// Parses the header entry of tensor `name` and copies its bytes from
// `data` (the data_size bytes after the header); sets `range` to its
// offsets in the data.
absl::StatusOr<HostTensor> ParseTensor(const std::string& name,
                                       const google::protobuf::Value& value,
                                       const char* data, uint64_t data_size,
                                       std::pair<uint64_t, uint64_t>* range) {
  const std::string what = absl::StrCat("tensor '", name, "'");
  if (value.kind_case() != google::protobuf::Value::kStructValue) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: ", what, " is not an object"));
  }
  const auto& fields = value.struct_value().fields();
  auto dtype_it = fields.find("dtype");
  auto shape_it = fields.find("shape");
  auto offsets_it = fields.find("data_offsets");
  if (dtype_it == fields.end() || shape_it == fields.end() ||
      offsets_it == fields.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: ", what, " needs dtype, shape and data_offsets"));
  }
  HostTensor t;
  auto dtype = DTypeFromName(dtype_it->second.string_value());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: ", what, ": ", dtype.status().message()));
  }
  t.dtype = *dtype;
  ASSIGN_OR_RETURN(t.shape, ParseShape(shape_it->second, t.dtype, what));
  ASSIGN_OR_RETURN(const auto offsets,
                   ParseDataOffsets(offsets_it->second, what, t, data_size));
  const auto [begin, end] = offsets;
  t.data.assign(data + begin, data + end);
  *range = std::pair<uint64_t, uint64_t>(begin, end);
  return t;
}

// INVALID_ARGUMENT unless the tensors' `ranges` cover the data_size bytes
// exactly, without overlaps or holes. Sorts `ranges`.
absl::Status CheckCoverage(std::vector<std::pair<uint64_t, uint64_t>>* ranges,
                           uint64_t data_size) {
  std::sort(ranges->begin(), ranges->end());
  uint64_t cursor = 0;
  for (const auto& [b, e] : *ranges) {
    if (b != cursor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: data_offsets ", b < cursor ? "overlap" : "leave a gap",
          " at byte ", std::min(b, cursor)));
    }
    cursor = e;
  }
  if (cursor != data_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: ", data_size - cursor,
        " bytes after the last tensor are not described by the header"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> SerializeSafetensors(const SafetensorsFile& file) {
  std::string header = "{";
  bool first = true;
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : file.metadata) {
      if (!first) header += ",";
      first = false;
      absl::StrAppend(&header, "\"", JsonEscape(k), "\":\"", JsonEscape(v),
                      "\"");
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    const uint64_t bytes = t.shape.numel() * DTypeSize(t.dtype);
    if (bytes != t.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor '", name, "' has ", t.data.size(), " bytes but ",
          DTypeName(t.dtype), " ", t.shape.ToString(), " needs ", bytes));
    }
    if (!file.metadata.empty() || !first) header += ",";
    first = false;
    absl::StrAppend(&header, "\"", JsonEscape(name), "\":{\"dtype\":\"",
                    DTypeName(t.dtype), "\",\"shape\":[");
    for (int i = 0; i < t.shape.rank(); ++i) {
      absl::StrAppend(&header, i ? "," : "", t.shape[i]);
    }
    absl::StrAppend(&header, "],\"data_offsets\":[", offset, ",",
                    offset + bytes, "]}");
    offset += bytes;
  }
  header += "}";
  // Pad with spaces to a multiple of 8 so the data is aligned.
  while (header.size() % 8 != 0) header += ' ';
  std::string out;
  out.reserve(8 + header.size() + offset);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  out += header;
  for (const auto& [name, t] : file.tensors) {
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  }
  return out;
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(const std::string& bytes) {
  ASSIGN_OR_RETURN(const uint64_t n, HeaderLength(bytes));
  const std::string header = bytes.substr(8, n);
  google::protobuf::Struct root;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(header, &root);
  if (!parsed.ok()) {
    // Not the parser's message: it quotes the bytes around the error.
    return absl::InvalidArgumentError(
        "safetensors: the header is not a JSON object");
  }
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;
  SafetensorsFile file;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, value] : root.fields()) {
    if (name == "__metadata__") {
      RETURN_IF_ERROR(ParseMetadata(value, &file.metadata));
      continue;
    }
    std::pair<uint64_t, uint64_t> range;
    ASSIGN_OR_RETURN(HostTensor t,
                     ParseTensor(name, value, data, data_size, &range));
    ranges.push_back(range);
    file.tensors[name] = std::move(t);
  }
  RETURN_IF_ERROR(CheckCoverage(&ranges, data_size));
  return file;
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto file = ParseSafetensors(buffer.str());
  if (!file.ok()) return Annotate(file.status(), path);
  return file;
}

absl::Status WriteSafetensorsFile(const std::string& path,
                                  const SafetensorsFile& file) {
  ASSIGN_OR_RETURN(std::string bytes, SerializeSafetensors(file));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      return absl::UnavailableError(
          absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
    }
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::UnavailableError(absl::StrCat(tmp, ": write failed"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot rename into place: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
