// The layout the CPU's decode kernels stream at the memory's pace: a 4- or
// 8-bit matrix (affine, group 64, bf16 scales) repacked at load into one
// stream of records, one per 16-row block and group (block-major):
//   4 bits, 576 bytes: [0, 512) 8 vectors j of 64 bytes; 32-bit lane r is row
//                     r of the block, its byte m holding in the low nibble the
//                     code of the input at byte m of the group's activation
//                     unit 2j and in the high nibble that of unit 2j + 1;
//   8 bits, 1088 bytes: [0, 1024) 16 vectors u, lane r's byte m the code of
//                     the input at byte m of unit u;
//   then 32 bytes of the 16 rows' scales, bf16, and 32 of their biases.
// A group's activation codes (kernels.h, code_offset) are 16 units of 4 bytes
// at unit_base + unit_stride * u, so one 4-byte dot product a 32-bit lane of a
// vector's nibbles with a broadcast unit adds 4 inputs to every row's sum
// (AVX-512: vpdpbusd on the whole vector; AVX2: vpmaddubsw and vpmaddwd, or
// AVX-VNNI's vpdpbusd, on each 32-byte half; NEON: sdot on each 16-byte
// quarter), and no row ever needs a horizontal sum. The plain layout streamed
// at 20-27 GB/s on this backend's 2-core machine where a plain read makes
// 53-79 (docs/cpu-backend.md).
#pragma once

#include <cstdint>

#include "backends/cpu/kernels.h"
#include "checkpoint/weights.h"

namespace tern::cpu {

constexpr int kPackRows = 16;
// Bytes of one record's codes and of the whole record (codes, then 16 bf16
// scales and 16 bf16 biases) for `bits` (4 or 8) bits a weight.
constexpr int64_t pack_code_bytes(int bits) {
  return kPackRows * kGroup * bits / 8;
}
constexpr int64_t pack_record_bytes(int bits) {
  return pack_code_bytes(bits) + 4 * kPackRows;
}

// Where a group's activation units start and how far apart they are: groups
// in whole blocks of 4 interleave theirs 16 bytes apart, later ones are 4
// bytes apart.
constexpr int64_t unit_base(int64_t G, int64_t g) {
  return g < G / kBlockGroups * kBlockGroups ? (g - g % kBlockGroups) * kGroup + 4 * (g % 4)
                                             : g * kGroup;
}
constexpr int64_t unit_stride(int64_t G, int64_t g) {
  return g < G / kBlockGroups * kBlockGroups ? 16 : 4;
}

// True for the matrices pack16 takes: affine 4- or 8-bit, group 64, bf16
// scales, rows a multiple of 16, at most kMaxPackGroups groups a row.
constexpr int64_t kMaxPackGroups = 256;
bool packable(const QTensor& w);

// Writes w's records (w.bytes() of them) to out.
void pack16(const QTensor& w, uint8_t* out);

// Repacks every matrix the fast backend multiplies that packable() takes (not
// the embedding, whose rows are looked up), into buffers the weights own, and
// gives the bytes they came from back to the system where the checkpoint was
// read into memory. Returns the bytes repacked. After it the weights need int8
// activations (gemm_q4; gemm_f32 reads plain rows only).
size_t pack_weights(ModelWeights& w);

// True when some matrix of w is packed.
bool has_packed(const ModelWeights& w);

}  // namespace tern::cpu
