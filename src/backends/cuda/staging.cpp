#include "backends/cuda/staging.h"

#include <algorithm>

#include "backends/cuda/check.h"

namespace tern::cuda {

Staging::~Staging() {
  for (int i = 0; i < 2; ++i) {
    if (done_[i] != nullptr) cudaEventDestroy(done_[i]);
    cudaFreeHost(host_[i]);
  }
}

std::byte* Staging::buffer(int i) {
  if (host_[i] == nullptr) {
    check(cudaMallocHost(reinterpret_cast<void**>(&host_[i]), slice_), "pinned staging");
    check(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming), "staging event");
  }
  return host_[i];
}

template <typename F>
void Staging::for_slices(std::span<const DeviceBytes> spans, F&& f) const {
  for (const DeviceBytes& s : spans)
    for (size_t at = 0; at < s.bytes; at += slice_) f(s.dev + at, std::min(slice_, s.bytes - at));
}

void Staging::upload(std::span<const DeviceBytes> to, const ByteSource& in, cudaStream_t stream) {
  int slot = 0;
  for_slices(to, [&](std::byte* dev, size_t n) {
    std::byte* host = buffer(slot);
    check(cudaEventSynchronize(done_[slot]), "staging");  // its previous copy is done
    in(std::span(host, n));
    check(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, stream), "upload");
    check(cudaEventRecord(done_[slot], stream), "staging");
    slot ^= 1;
  });
  check(cudaStreamSynchronize(stream), "upload");
}

void Staging::download(std::span<const DeviceBytes> from, const ByteSink& out,
                       cudaStream_t stream) {
  // The copy of each slice is queued before the one before is handed out.
  int slot = 0, pending = -1;
  size_t pending_bytes = 0;
  auto hand_out = [&] {
    check(cudaEventSynchronize(done_[pending]), "download");
    out(std::span<const std::byte>(host_[pending], pending_bytes));
  };
  for_slices(from, [&](std::byte* dev, size_t n) {
    std::byte* host = buffer(slot);
    check(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, stream), "download");
    check(cudaEventRecord(done_[slot], stream), "staging");
    if (pending >= 0) hand_out();
    pending = slot, pending_bytes = n;
    slot ^= 1;
  });
  if (pending >= 0) hand_out();
}

}  // namespace tern::cuda
