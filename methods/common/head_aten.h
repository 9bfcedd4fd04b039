// The drafter heads' ATen path: where a head runs (HeadPlacement) and the batched ATen ops their
// device forwards are built from (RMSNorm, rotate-half RoPE, masked GQA attention, SwiGLU, a
// device RoPE table). The heads' CPU row loops (methods/common/head_kernels.h) stay the CPU fast
// path; this path runs on every non-CPU device and, when the target's ATen path is forced on the
// CPU (SPECBED_FORWARD=aten or SetCpuForwardPathOverride), on the CPU too, so CPU CI checks it
// against the row loops. Norms, RoPE and softmax compute in float32 whatever the head's dtype.
// Checked by: tests/methods/eagle3_head_test.cpp (Eagle3HeadAten: the head's ATen path against
// its row loops) and tests/methods/aten_path_test.cpp (every method on the ATen path).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace specbed {

class LlamaModel;

// Where a drafter head runs: the target's device and dtype, and which forward.
struct HeadPlacement {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;  // the row loops always run float32
  bool aten = false;                  // the ATen path (always off the CPU)
};

// The placement for a head serving a target on (device, dtype): the ATen path off the CPU and
// wherever the target's forward path resolves to ATen on the CPU (ResolveForwardPath); the row
// loops (float32) otherwise.
HeadPlacement ResolveHeadPlacement(const at::Device& device, at::ScalarType dtype);
// ResolveHeadPlacement on the target model's device and dtype.
HeadPlacement TargetHeadPlacement(const LlamaModel& target);

// Weights for a placement: float32 norms stay float32; everything else is cast to the
// placement's dtype (float32 on the row path) and moved to its device, contiguous.
at::Tensor PlaceWeight(const at::Tensor& t, const HeadPlacement& placement);
at::Tensor PlaceNormWeight(const at::Tensor& t, const HeadPlacement& placement);

// x [n, d] any float dtype; w float32 [d] on x's device -> x / rms(x) * w, [n, d] in x's dtype.
at::Tensor RmsNormRowsAten(const at::Tensor& x, const at::Tensor& w, double eps);

// x [n, heads, head_dim] any float dtype; cos, sin float32 [n, head_dim / 2] (row i = x's row i)
// -> x rotated with the rotate_half pairing (i with i + head_dim / 2), in x's dtype.
at::Tensor RotateHalfRopeAten(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// q [n, heads, head_dim]; k, v [kv_heads, S, head_dim] (heads % kv_heads == 0, head h reads kv
// head h / (heads / kv_heads)), all one dtype and device; allowed bool [n, S] (true = row i may
// attend to slot s) -> softmax(q k^T * scale) v as [n, heads * head_dim] in q's dtype, softmax in
// float32. A row with no allowed slot gets zeros.
at::Tensor MaskedGqaAttentionAten(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& allowed, double scale);

// allowed bool [n, past + n] on `device`: row i may attend to slots <= past + i (causal).
at::Tensor CausalAllowedAten(int64_t n, int64_t past, const at::Device& device);

// gate_up [n, 2 * I] (gate first) -> silu(gate) * up, [n, I] in gate_up's dtype.
at::Tensor SwiGluAten(const at::Tensor& gate_up);

// A RoPE cos/sin table on a device (float32 [capacity, half], row p = position p): the row path's
// host table (GrowRopeTable, head_kernels.h: the same values) uploaded once per growth.
class DeviceRopeTable {
 public:
  void Ensure(const std::vector<double>& inv_freq, int64_t max_position, const at::Device& device);
  // cos / sin rows of `positions` (int64 [n] on the table's device) as float32 [n, half].
  at::Tensor Cos(const at::Tensor& positions) const { return cos_.index_select(0, positions); }
  at::Tensor Sin(const at::Tensor& positions) const { return sin_.index_select(0, positions); }

 private:
  std::vector<float> host_cos_, host_sin_;
  int64_t host_capacity_ = 0;
  at::Tensor cos_, sin_;
};

// The k best entries of the log-softmax of every row of float32 logits [n, V] (on any device),
// highest first, downloaded in one copy into host arrays ids[n * k] and logp[n * k] (<= 0). Ids
// are column indices, or id_map[column] when `id_map` (int64 [V], logits' device) is defined.
// Equal logits rank in ATen's topk order (the host passes break ties by the smaller id).
void DownloadTopKLogProbs(const at::Tensor& logits, int64_t k, const at::Tensor& id_map,
                          int32_t* ids, float* logp);

// A host staging buffer for one step's small inputs, an int64 section and a uint8 section,
// uploaded to a device in one copy (pageable memory, so the copy is synchronous). Resize lays
// both sections out (host memory grows, never shrinks); Upload returns their device views.
class HostStaging {
 public:
  void Resize(int64_t n_int64, int64_t n_bytes);
  int64_t* ints() { return reinterpret_cast<int64_t*>(host_.data()); }
  uint8_t* bytes() { return host_.data() + 8 * n_int64_; }
  // (int64 [n_int64], uint8 [n_bytes]) on `device`; a CPU device gets views of the host memory.
  std::pair<at::Tensor, at::Tensor> Upload(const at::Device& device);

 private:
  std::vector<uint8_t> host_;
  int64_t n_int64_ = 0, n_bytes_ = 0;
};

}  // namespace specbed
