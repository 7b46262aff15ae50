#include "common/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

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
  const std::string header = bytes.substr(8, n);
  google::protobuf::Struct root;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(header, &root);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: header is not a JSON object: ", parsed.ToString()));
  }
  const uint64_t data_size = bytes.size() - 8 - n;
  SafetensorsFile file;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, value] : root.fields()) {
    if (name == "__metadata__") {
      if (value.kind_case() != google::protobuf::Value::kStructValue) {
        return absl::InvalidArgumentError(
            "safetensors: __metadata__ is not an object");
      }
      for (const auto& [k, v] : value.struct_value().fields()) {
        if (v.kind_case() != google::protobuf::Value::kStringValue) {
          return absl::InvalidArgumentError(absl::StrCat(
              "safetensors: __metadata__ value of '", k, "' is not a string"));
        }
        file.metadata[k] = v.string_value();
      }
      continue;
    }
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
    if (shape_it->second.kind_case() != google::protobuf::Value::kListValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: ", what, ": shape is not a list"));
    }
    std::vector<int64_t> dims;
    for (const auto& d : shape_it->second.list_value().values()) {
      ASSIGN_OR_RETURN(int64_t dim, AsCount(d, what + " shape entry"));
      dims.push_back(dim);
    }
    t.shape = Shape(std::move(dims));
    const auto& offsets = offsets_it->second;
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
          "safetensors: ", what, ": data_offsets [", begin, ", ", end,
          "] hold ", end - begin, " bytes but ", DTypeName(t.dtype), " ",
          t.shape.ToString(), " needs ", want));
    }
    t.data.assign(bytes.begin() + 8 + n + begin, bytes.begin() + 8 + n + end);
    ranges.emplace_back(begin, end);
    file.tensors[name] = std::move(t);
  }
  // The data must be covered exactly, without overlaps or holes.
  std::sort(ranges.begin(), ranges.end());
  uint64_t cursor = 0;
  for (const auto& [b, e] : ranges) {
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
