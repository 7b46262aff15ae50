#include "worker/runtime/frame.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/device/bf16.h"
#include "common/status.h"

namespace aqueduct {

namespace {

constexpr uint32_t kMagic = 0x41514652;  // "AQFR"
constexpr int kMaxDims = 8;
// Header.dtype of a tensor sent as bfloat16.
constexpr int32_t kBf16Wire = 0x42463136;  // "BF16"

// The tensor's bytes on the wire.
size_t WireBytes(int64_t numel, bool bf16) {
  return static_cast<size_t>(numel) * (bf16 ? 2 : sizeof(float));
}

// `data` (on `device`) as bfloat16 at `out`.
absl::Status PutBf16(Device& device, const Tensor& data, char* out) {
  std::vector<float> host;
  const float* x = data.f32();
  if (device.kind() != DeviceKind::kCpu) {
    host.resize(data.numel());
    RETURN_IF_ERROR(device.CopyToHost(data, host.data()));
    x = host.data();
  }
  auto* y = reinterpret_cast<uint16_t*>(out);
  for (int64_t i = 0; i < data.numel(); ++i) y[i] = ToBf16(x[i]);
  return absl::OkStatus();
}

// bfloat16 at `in` into the F32 tensor `data` (on `device`).
absl::Status GetBf16(Device& device, const char* in, const Tensor& data) {
  std::vector<float> host;
  float* y = data.f32();
  if (device.kind() != DeviceKind::kCpu) {
    host.resize(data.numel());
    y = host.data();
  }
  const auto* x = reinterpret_cast<const uint16_t*>(in);
  for (int64_t i = 0; i < data.numel(); ++i) y[i] = FromBf16(x[i]);
  if (host.empty()) return absl::OkStatus();
  return device.CopyFromHost(host.data(), data);
}

struct Header {
  uint32_t magic = kMagic;
  uint32_t kind = 0;
  int64_t minibatch = 0;
  int32_t microbatch = 0;
  int32_t sender = 0;
  int64_t version = 0;
  int32_t ndims = 0;
  int32_t dtype = 0;
  int32_t stage = 0;
  int32_t reserved = 0;
  int64_t dims[kMaxDims] = {};
  int64_t num_labels = 0;
};

size_t HeadBytes(int64_t num_labels) {
  return sizeof(Header) + static_cast<size_t>(num_labels) * sizeof(int32_t);
}

// Where the tensor starts in a one-transfer frame.
size_t InlineOffset(int64_t num_labels) {
  return (HeadBytes(num_labels) + 63) / 64 * 64;
}

const char* KindName(uint32_t kind) {
  switch (kind) {
    case static_cast<uint32_t>(FrameKind::kActivation):
      return "activation";
    case static_cast<uint32_t>(FrameKind::kGradient):
      return "gradient";
    default:
      return "frame of unknown kind";
  }
}

// A transfer on a device channel, holding its tensor until it completes.
class ChannelWork final : public Work {
 public:
  ChannelWork(DeviceChannel* channel, uint64_t ticket, Tensor keep)
      : channel_(channel), ticket_(ticket), keep_(std::move(keep)) {}
  absl::Status Wait(absl::Time deadline) override {
    RETURN_IF_ERROR(channel_->Wait(ticket_, deadline));
    keep_ = Tensor();
    return absl::OkStatus();
  }

 private:
  DeviceChannel* channel_;
  uint64_t ticket_;
  Tensor keep_;
};

// A frame sent as a header and a body.
class TwoSends final : public Work {
 public:
  TwoSends(std::unique_ptr<Work> header, std::unique_ptr<Work> body)
      : header_(std::move(header)), body_(std::move(body)) {}
  absl::Status Wait(absl::Time deadline) override {
    RETURN_IF_ERROR(header_->Wait(deadline));
    return body_->Wait(deadline);
  }

 private:
  std::unique_ptr<Work> header_, body_;
};

}  // namespace

uint64_t FrameTag(FrameKind kind, int64_t minibatch, int microbatch,
                  int chunk) {
  return (static_cast<uint64_t>(minibatch) << 25) |
         (static_cast<uint64_t>(chunk) << 19) |
         (static_cast<uint64_t>(microbatch) << 3) |
         (static_cast<uint64_t>(kind) << 1);
}

absl::StatusOr<std::unique_ptr<Work>> SendFrame(
    Communicator& comm, Device& device, int peer, const FrameInfo& info,
    const Tensor& data, const Tensor* labels, DeviceChannels* channels,
    bool bf16) {
  if (channels != nullptr) bf16 = false;
  if (data.dtype() != DType::kF32 || data.shape().rank() > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("a frame carries an F32 tensor of rank <= ", kMaxDims,
                     "; got ", data.shape().ToString()));
  }
  Header h;
  h.kind = static_cast<uint32_t>(info.kind);
  h.minibatch = info.minibatch;
  h.microbatch = info.microbatch;
  h.sender = info.sender;
  h.version = info.version;
  h.stage = info.stage;
  h.ndims = data.shape().rank();
  h.dtype = bf16 ? kBf16Wire : static_cast<int32_t>(DType::kF32);
  for (int d = 0; d < h.ndims; ++d) h.dims[d] = data.shape()[d];
  h.num_labels = labels != nullptr ? labels->numel() : 0;
  const uint64_t tag =
      FrameTag(info.kind, info.minibatch, info.microbatch, info.chunk);
  if (channels != nullptr) {
    // Header and labels over the communicator, the tensor over the channel.
    std::string head(HeadBytes(h.num_labels), '\0');
    std::memcpy(head.data(), &h, sizeof(Header));
    if (h.num_labels > 0) {
      RETURN_IF_ERROR(device.CopyToHost(*labels, head.data() + sizeof(Header)));
    }
    DeviceChannel* channel =
        channels->Get(static_cast<int>(info.kind), comm.rank(), peer);
    if (channel == nullptr) {
      return absl::InternalError(absl::StrCat("no device channel for ",
                                              KindName(h.kind), "s from rank ",
                                              comm.rank(), " to rank ", peer));
    }
    std::unique_ptr<Work> header = comm.SendExact(peer, tag, std::move(head));
    // The channel reads device memory on its own stream: the producer's
    // work must be done.
    RETURN_IF_ERROR(device.Synchronize());
    ASSIGN_OR_RETURN(uint64_t ticket, channel->Send(data.raw(), data.nbytes()));
    return std::make_unique<TwoSends>(
        std::move(header),
        std::make_unique<ChannelWork>(channel, ticket, data));
  }
  // One transfer: header, labels, padding to 64 bytes, tensor.
  const size_t offset = InlineOffset(h.num_labels);
  const size_t total = offset + WireBytes(data.numel(), bf16);
  const bool in_place = !bf16 && device.kind() == DeviceKind::kCpu &&
                        device.headroom() >= offset &&
                        data.raw() == data.buffer()->data();
  char* out = nullptr;
  Tensor whole;
  std::string staged;
  if (in_place) {
    // The header goes into the headroom the device keeps before every
    // buffer; the tensor is not copied.
    out = static_cast<char*>(data.raw()) - offset;
    whole = data;
  } else if (device.kind() == DeviceKind::kCpu) {
    // A view, or labels beyond the headroom: one copy, into memory from the
    // device's allocator (reused, no page faults).
    ASSIGN_OR_RETURN(
        whole, device.Allocate(Shape({static_cast<int64_t>((total + 3) / 4)}),
                               DType::kF32));
    out = static_cast<char*>(whole.raw());
  } else {
    staged.resize(total);
    out = staged.data();
  }
  std::memset(out, 0, offset);
  std::memcpy(out, &h, sizeof(Header));
  if (h.num_labels > 0) {
    RETURN_IF_ERROR(device.CopyToHost(*labels, out + sizeof(Header)));
  }
  if (bf16) {
    RETURN_IF_ERROR(PutBf16(device, data, out + offset));
  } else if (!in_place) {
    RETURN_IF_ERROR(device.CopyToHost(data, out + offset));
  }
  if (whole.defined()) {
    return comm.SendBuffer(peer, tag, out, total, whole.buffer());
  }
  return comm.SendExact(peer, tag, std::move(staged));
}

absl::StatusOr<std::unique_ptr<PendingFrame>> PendingFrame::Post(
    Communicator& comm, Device& device, int peer, FrameKind kind,
    int64_t minibatch, int microbatch, const Shape& shape, int64_t num_labels,
    DeviceChannels* channels, int stage, int chunk, bool bf16) {
  std::unique_ptr<PendingFrame> f(new PendingFrame());
  f->bf16_ = bf16 && channels == nullptr;
  f->device_ = &device;
  f->kind_ = kind;
  f->minibatch_ = minibatch;
  f->microbatch_ = microbatch;
  f->stage_ = stage;
  f->shape_ = shape;
  f->num_labels_ = num_labels;
  const uint64_t tag = FrameTag(kind, minibatch, microbatch, chunk);
  const size_t data_bytes = WireBytes(shape.numel(), f->bf16_);
  const bool cpu = device.kind() == DeviceKind::kCpu;
  if (channels != nullptr) {
    // Header on the communicator, tensor on the device channel, straight
    // into device memory.
    DeviceChannel* channel =
        channels->Get(static_cast<int>(kind), peer, comm.rank());
    if (channel == nullptr) {
      return absl::InternalError(absl::StrCat(
          "no device channel for ", KindName(static_cast<uint32_t>(kind)),
          "s from rank ", peer, " to rank ", comm.rank()));
    }
    ASSIGN_OR_RETURN(f->data_, device.Allocate(shape, DType::kF32));
    f->header_ = comm.RecvExact(peer, tag, HeadBytes(num_labels));
    ASSIGN_OR_RETURN(uint64_t ticket,
                     channel->Recv(f->data_.raw(), f->data_.nbytes()));
    f->body_ = std::make_unique<ChannelWork>(channel, ticket, f->data_);
    return f;
  }
  // One transfer; on the CPU the tensor is a view into what arrived.
  f->offset_ = InlineOffset(num_labels);
  const size_t total = f->offset_ + data_bytes;
  void* dst = nullptr;
  if (cpu) {
    ASSIGN_OR_RETURN(
        f->whole_,
        device.Allocate(Shape({static_cast<int64_t>((total + 3) / 4)}),
                        DType::kF32));
    dst = f->whole_.raw();
  } else {
    f->staging_.resize(total);
    dst = f->staging_.data();
  }
  f->body_ = comm.RecvBuffer(peer, tag, dst, total);
  return f;
}

PendingFrame::~PendingFrame() = default;

absl::StatusOr<Frame> PendingFrame::Wait(absl::Time deadline,
                                         const std::string& who) {
  const size_t expected_bytes = HeadBytes(num_labels_);
  std::string separate;
  const char* head = nullptr;
  size_t head_size = 0;
  // Transport errors and deadlines, with what was being received.
  auto in_context = [&](const absl::Status& s) {
    return absl::Status(
        s.code(), absl::StrCat(who, " receiving the ",
                               KindName(static_cast<uint32_t>(kind_)),
                               " of minibatch ", minibatch_, " microbatch ",
                               microbatch_, ": ", s.message()));
  };
  if (header_ != nullptr) {
    absl::StatusOr<std::string> got = header_->Wait(deadline);
    if (!got.ok()) return in_context(got.status());
    separate = *std::move(got);
    head = separate.data();
    head_size = separate.size();
  } else {
    // One transfer: exact-size, so a wrong frame cannot overrun; check its
    // header before the tensor is used.
    if (absl::Status s = body_->Wait(deadline); !s.ok()) return in_context(s);
    head = whole_.defined() ? static_cast<const char*>(whole_.raw())
                            : staging_.data();
    head_size = expected_bytes;
  }
  Header h;
  if (head_size >= sizeof(Header)) std::memcpy(&h, head, sizeof(h));
  Shape got;
  if (h.ndims >= 0 && h.ndims <= kMaxDims) {
    got = Shape(std::vector<int64_t>(h.dims, h.dims + h.ndims));
  }
  const uint32_t kind = static_cast<uint32_t>(kind_);
  const bool ok =
      head_size == expected_bytes && h.magic == kMagic && h.kind == kind &&
      h.minibatch == minibatch_ && h.microbatch == microbatch_ &&
      h.stage == stage_ && got == shape_ &&
      h.dtype == (bf16_ ? kBf16Wire : static_cast<int32_t>(DType::kF32)) &&
      h.num_labels == num_labels_;
  if (!ok) {
    return absl::DataLossError(absl::StrCat(
        who, " expected the ", KindName(kind), " of stage ", stage_,
        " minibatch ", minibatch_, " microbatch ", microbatch_, " with shape ",
        shape_.ToString(), bf16_ ? " in bf16" : "", " and ", num_labels_,
        " labels; received ",
        h.magic == kMagic ? KindName(h.kind) : "a header with a bad magic",
        " of stage ", h.stage, " minibatch ", h.minibatch, " microbatch ",
        h.microbatch, " with shape ", got.ToString(),
        h.dtype == kBf16Wire ? " in bf16" : "", " and ", h.num_labels,
        " labels (", head_size, " header bytes, expected ", expected_bytes,
        ")"));
  }
  if (header_ != nullptr) {
    // A device channel: the tensor lands in data_ itself.
    if (absl::Status s = body_->Wait(deadline); !s.ok()) return in_context(s);
  } else if (bf16_) {
    ASSIGN_OR_RETURN(data_, device_->Allocate(shape_, DType::kF32));
    RETURN_IF_ERROR(GetBf16(*device_, head + offset_, data_));
  } else if (whole_.defined()) {
    data_ = Tensor(whole_.buffer(), shape_, DType::kF32, offset_);
  } else {
    ASSIGN_OR_RETURN(data_, device_->Allocate(shape_, DType::kF32));
    RETURN_IF_ERROR(device_->CopyFromHost(staging_.data() + offset_, data_));
  }
  Frame frame;
  frame.info.kind = kind_;
  frame.info.minibatch = h.minibatch;
  frame.info.microbatch = h.microbatch;
  frame.info.sender = h.sender;
  frame.info.version = h.version;
  frame.info.stage = h.stage;
  frame.data = data_;
  frame.labels.resize(num_labels_);
  if (num_labels_ > 0) {
    std::memcpy(frame.labels.data(), head + sizeof(Header),
                num_labels_ * sizeof(int32_t));
  }
  return frame;
}

}  // namespace aqueduct
