#include "common/device/factory.h"

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(DeviceFactoryTest, ParsesCpuAndCuda) {
  auto cpu = ParseDeviceSpec("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->kind, DeviceKind::kCpu);
  auto gpu = ParseDeviceSpec("cuda:3");
  ASSERT_TRUE(gpu.ok());
  EXPECT_EQ(gpu->kind, DeviceKind::kCuda);
  EXPECT_EQ(gpu->ordinal, 3);
  for (const char* bad : {"", "gpu", "cuda", "cuda:", "cuda:-1", "cuda:x"}) {
    auto s = ParseDeviceSpec(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("cuda:N"), absl::string_view::npos);
  }
}

TEST(DeviceFactoryTest, GemmPrecisions) {
  EXPECT_EQ(*ParseGemmPrecision("fp32"), GemmPrecision::kFp32);
  EXPECT_EQ(*ParseGemmPrecision("tf32"), GemmPrecision::kTf32);
  EXPECT_EQ(*ParseGemmPrecision("bf16"), GemmPrecision::kBf16);
  auto bad = ParseGemmPrecision("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "bad GEMM precision \"fp8\": expected fp32, tf32 or bf16");
  DeviceSpec cpu;
  cpu.gemm = GemmPrecision::kBf16;
  auto bf16 = CreateDevice(cpu, 1);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_TRUE((*bf16)->bf16_gemm());
  cpu.gemm = GemmPrecision::kTf32;
  auto refused = CreateDevice(cpu, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("need a CUDA device"),
            absl::string_view::npos);
}

TEST(DeviceFactoryTest, CreatesCpuDevice) {
  auto device = CreateDevice(DeviceSpec{}, 1);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->kind(), DeviceKind::kCpu);
}

TEST(DeviceFactoryTest, CudaFailsClearlyWithoutAGpu) {
  DeviceSpec spec;
  spec.kind = DeviceKind::kCuda;
  spec.ordinal = 0;
  auto device = CreateDevice(spec, 0);
  if (device.ok()) {
    // A CUDA build on a GPU machine.
    EXPECT_EQ((*device)->kind(), DeviceKind::kCuda);
    return;
  }
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition)
      << device.status();
  EXPECT_NE(
      device.status().message().find(BuiltWithCuda() ? "no usable CUDA device"
                                                     : "built without CUDA"),
      absl::string_view::npos)
      << device.status();
}

}  // namespace
}  // namespace aqueduct
