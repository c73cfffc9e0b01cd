// Bytes between the disk cache's files and the device through two pinned host
// buffers: reading one slice overlaps the copy of the one before, and no copy
// goes through pageable memory (a driver staging copy and, on first touch, a
// page fault per 4 KB: a 4K-token load through pageable buffers took longer
// than the prefill it replaces).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

#include "backend/backend.h"

namespace tern::cuda {

// A stretch of device memory, in the order its bytes have in the file.
struct DeviceBytes {
  std::byte* dev;
  size_t bytes;
};

class Staging {
 public:
  // slice: each buffer's bytes.
  explicit Staging(size_t slice = size_t(8) << 20) : slice_(slice) {}
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Fills `to` from `in` with copies on `stream`; returns when they are done.
  void upload(std::span<const DeviceBytes> to, const ByteSource& in, cudaStream_t stream);
  // Hands `from` to `out` (after the work queued on `stream`), slice by slice.
  void download(std::span<const DeviceBytes> from, const ByteSink& out, cudaStream_t stream);

 private:
  // Buffer i (allocated on first use).
  std::byte* buffer(int i);
  // Each slice of `spans` in order: f(device address, bytes).
  template <typename F>
  void for_slices(std::span<const DeviceBytes> spans, F&& f) const;

  size_t slice_;
  std::byte* host_[2] = {};
  cudaEvent_t done_[2] = {};  // buffer i's last copy
};

}  // namespace tern::cuda
