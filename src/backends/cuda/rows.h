// The decode step over several sequences (CudaBackend::step): one graph
// whose launches each cover every row, with each row's arguments (its state,
// its scratch) as it would run alone. A per-row kernel takes the rows'
// arguments in one parameter block and works for row blockIdx.z; the dense
// GEMVs read each weight tile once for all rows (gemv_rows). A row's results
// do not depend on the others: nothing is summed across rows.
#pragma once

namespace tern::cuda {

// Rows a step graph computes: a step lane's scratch each (cuda_sequence.h;
// more rows go in waves).
constexpr int kMaxRows = 8;

// One launch's arguments for each of its rows; block (x, y, z) works for row z.
template <typename A>
struct RowArgs {
  A row[kMaxRows];
};

// The launchers take n rows' arguments at `rows` (the .cu files are C++17).
template <typename A>
RowArgs<A> row_args(const A* rows, int n) {
  RowArgs<A> r{};
  for (int i = 0; i < n && i < kMaxRows; ++i) r.row[i] = rows[i];
  return r;
}

// Whether n rows fit one launch.
inline bool rows_fit(int n) {
  return n >= 1 && n <= kMaxRows;
}

#ifdef __CUDACC__
// What a kernel templated on its parameter works on: the arguments of a
// single-row launch, or its row's.
template <typename A>
__device__ __forceinline__ const A& args_of(const A& a) {
  return a;
}
template <typename A>
__device__ __forceinline__ const A& args_of(const RowArgs<A>& r) {
  return r.row[blockIdx.z];
}
#endif

}  // namespace tern::cuda
