// The fused decoder-layer ops: argument checks and CPU / CUDA dispatch (see kernels/decoder_ops.h).
// Checked by: tests/kernels/decoder_ops_test.cpp.
#include "kernels/decoder_ops.h"

#include "kernels/kernel_wrapper.h"

namespace specbed {
namespace {

using namespace kernel_detail;

int32_t ElementOf(const char* kernel, const char* name, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return kElementFloat32;
    case at::kBFloat16:
      return kElementBFloat16;
    case at::kHalf:
      return kElementFloat16;
    default:
      throw Error(StrCat(kernel, ": ", name, " is ", DtypeName(t.scalar_type()),
                         "; expected float32, bfloat16 or float16"));
  }
}

// [rows, d] with unit stride in d, of `dtype`, on `ref`'s device.
void CheckRows(const char* kernel, const char* name, const at::Tensor& t, int64_t rows, int64_t d,
               at::ScalarType dtype, const at::Tensor& ref) {
  SPECBED_CHECK(t.defined() && t.dim() == 2 && t.size(0) == rows && t.size(1) == d &&
                    (d <= 1 || t.stride(1) == 1) && t.scalar_type() == dtype,
                kernel, ": ", name, " must be ", DtypeName(dtype), " [", rows, ", ", d,
                "] with unit stride in the last dim; got ",
                t.defined()
                    ? StrCat(DtypeName(t.scalar_type()), " ", t.sizes(), " strides ", t.strides())
                    : std::string("an undefined tensor"));
  CheckSameDevice(kernel, name, t, "the input", ref);
}

void CheckOptionalNorm(const char* kernel, const char* name, const at::Tensor& w, int64_t d,
                       const at::Tensor& ref) {
  if (!w.defined()) return;
  CheckTensor(kernel, name, w, {at::kFloat}, {d}, "[hd]");
  CheckSameDevice(kernel, name, w, "qkv", ref);
}

// One layer of a KvCache's storage [n_layers, 2, B, KVH, max_len, hd] (checked): its shape and
// the addresses of its keys and values.
struct LayerCache {
  int64_t batch, kv_heads, max_len, hd;
  char* k;
  char* v;
};
LayerCache CheckLayerCache(const char* kernel, const at::Tensor& cache, int64_t layer) {
  CheckTensor(kernel, "cache", cache, {at::kFloat, at::kBFloat16, at::kHalf},
              {-1, 2, -1, -1, -1, -1}, "[n_layers, 2, B, KVH, max_len, hd]");
  SPECBED_CHECK(layer >= 0 && layer < cache.size(0), kernel, ": layer ", layer, " outside [0, ",
                cache.size(0), ")");
  LayerCache c{cache.size(2), cache.size(3), cache.size(4), cache.size(5), nullptr, nullptr};
  const int64_t half_bytes = c.batch * c.kv_heads * c.max_len * c.hd * cache.element_size();
  c.k = static_cast<char*>(cache.data_ptr()) + layer * 2 * half_bytes;
  c.v = c.k + half_bytes;
  return c;
}

}  // namespace

void FusedRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& out) {
  constexpr const char* kKernel = "FusedRmsNorm";
  SPECBED_RECORD_KERNEL("rms_norm", x, w, out);
  SPECBED_CHECK(x.defined() && x.dim() == 2, kKernel, ": x must be [rows, d]");
  const int64_t rows = x.size(0), d = x.size(1);
  const int32_t element = ElementOf(kKernel, "x", x);
  CheckRows(kKernel, "x", x, rows, d, x.scalar_type(), x);
  CheckRows(kKernel, "out", out, rows, d, x.scalar_type(), x);
  CheckTensor(kKernel, "w", w, {at::kFloat}, {d}, "[d]");
  CheckSameDevice(kKernel, "w", w, "x", x);
  const KernelDevice device = DeviceOf(kKernel, "x", x);
  if (device == KernelDevice::kCpu) {
    CheckKernelStatus(
        kKernel, device,
        cpu::RmsNormRows(x.data_ptr(), x.stride(0), w.data_ptr<float>(), out.data_ptr(),
                         out.stride(0), rows, d, static_cast<float>(eps), element));
    return;
  }
  CudaLaunchScope scope(x);
  CheckKernelStatus(kKernel, device,
                    scope.kernels().rms_norm_rows(
                        x.data_ptr(), x.stride(0), w.data_ptr<float>(), out.data_ptr(),
                        out.stride(0), rows, d, static_cast<float>(eps), element, scope.stream()));
}

void FusedSiluMul(const at::Tensor& gate_up, const at::Tensor& act) {
  constexpr const char* kKernel = "FusedSiluMul";
  SPECBED_RECORD_KERNEL("silu_mul", gate_up, act);
  CheckTensor(kKernel, "gate_up", gate_up, {at::kFloat, at::kBFloat16, at::kHalf}, {-1, -1},
              "[rows, 2 * hidden]");
  const int64_t rows = gate_up.size(0), hidden = gate_up.size(1) / 2;
  SPECBED_CHECK(gate_up.size(1) % 2 == 0, kKernel, ": gate_up's width ", gate_up.size(1),
                " is odd; expected [rows, 2 * hidden]");
  CheckTensor(kKernel, "act", act, {gate_up.scalar_type()}, {rows, hidden}, "[rows, hidden]");
  CheckSameDevice(kKernel, "act", act, "gate_up", gate_up);
  const int32_t element = ElementOf(kKernel, "gate_up", gate_up);
  const KernelDevice device = DeviceOf(kKernel, "gate_up", gate_up);
  if (device == KernelDevice::kCpu) {
    CheckKernelStatus(kKernel, device,
                      cpu::SiluMulRows(gate_up.data_ptr(), act.data_ptr(), rows, hidden, element));
    return;
  }
  CudaLaunchScope scope(gate_up);
  CheckKernelStatus(kKernel, device,
                    scope.kernels().silu_mul_rows(gate_up.data_ptr(), act.data_ptr(), rows, hidden,
                                                  element, scope.stream()));
}

void FusedRopeKvWrite(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& slots,
                      const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& q_norm,
                      const at::Tensor& k_norm, double eps, bool interleaved,
                      const at::Tensor& q_out, const at::Tensor& cache, int64_t layer) {
  constexpr const char* kKernel = "FusedRopeKvWrite";
  SPECBED_RECORD_KERNEL("rope_kv_write", qkv, positions, slots, q_out, cache, layer);
  const LayerCache lc = CheckLayerCache(kKernel, cache, layer);
  const int64_t batch = lc.batch, kv_heads = lc.kv_heads, max_len = lc.max_len, hd = lc.hd;
  SPECBED_CHECK(hd % 2 == 0 && hd <= 1024, kKernel, ": head_dim ", hd, " must be even and <= 1024");
  CheckTensor(kKernel, "q_out", q_out, {cache.scalar_type()}, {batch, -1, -1, hd}, "[B, H, T, hd]");
  const int64_t heads = q_out.size(1), tokens = q_out.size(2), rows = batch * tokens;
  CheckTensor(kKernel, "qkv", qkv, {cache.scalar_type()}, {rows, (heads + 2 * kv_heads) * hd},
              "[B * T, (H + 2 KVH) * hd]");
  CheckTensor(kKernel, "positions", positions, {at::kLong}, {rows}, "[B * T]");
  CheckTensor(kKernel, "slots", slots, {at::kLong}, {rows}, "[B * T]");
  CheckTensor(kKernel, "cos", cos, {at::kFloat}, {-1, hd / 2}, "[P, hd / 2]");
  CheckTensor(kKernel, "sin", sin, {at::kFloat}, {cos.size(0), hd / 2}, "[P, hd / 2]");
  CheckOptionalNorm(kKernel, "q_norm", q_norm, hd, qkv);
  CheckOptionalNorm(kKernel, "k_norm", k_norm, hd, qkv);
  CheckSameDevices(kKernel,
                   {{"positions", positions},
                    {"slots", slots},
                    {"cos", cos},
                    {"sin", sin},
                    {"q_out", q_out},
                    {"cache", cache}},
                   "qkv", qkv);
  RopeKvWriteArgs a;
  a.qkv = qkv.data_ptr();
  a.positions = positions.data_ptr<int64_t>();
  a.slots = slots.data_ptr<int64_t>();
  a.cos = cos.data_ptr<float>();
  a.sin = sin.data_ptr<float>();
  a.q_norm = q_norm.defined() ? q_norm.data_ptr<float>() : nullptr;
  a.k_norm = k_norm.defined() ? k_norm.data_ptr<float>() : nullptr;
  a.q_out = q_out.data_ptr();
  a.k_cache = lc.k;
  a.v_cache = lc.v;
  a.batch = batch;
  a.tokens = tokens;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = hd;
  a.max_len = max_len;
  a.n_positions = cos.size(0);
  a.eps = static_cast<float>(eps);
  a.interleaved = interleaved;
  a.element = ElementOf(kKernel, "qkv", qkv);
  const KernelDevice device = DeviceOf(kKernel, "qkv", qkv);
  if (device == KernelDevice::kCpu) {
    const int status = cpu::RopeKvWrite(a);
    SPECBED_CHECK(status != kKernelBadInput, kKernel, ": a position outside [0, ", a.n_positions,
                  ") or a slot outside [0, max_len = ", max_len, ")");
    CheckKernelStatus(kKernel, device, status);
    return;
  }
  CudaLaunchScope scope(qkv);
  CheckKernelStatus(kKernel, device, scope.kernels().rope_kv_write(a, scope.stream()));
}

void FusedTreeAttention(const at::Tensor& q, const at::Tensor& cache, int64_t layer,
                        const at::Tensor& kv_len, const at::Tensor& tree_bits, double scale,
                        const at::Tensor& out) {
  constexpr const char* kKernel = "FusedTreeAttention";
  SPECBED_RECORD_KERNEL("tree_attention", q, cache, layer, kv_len, tree_bits, out);
  const LayerCache lc = CheckLayerCache(kKernel, cache, layer);
  const int64_t batch = lc.batch, kv_heads = lc.kv_heads, max_len = lc.max_len, hd = lc.hd;
  CheckTensor(kKernel, "q", q, {cache.scalar_type()}, {batch, -1, -1, hd}, "[B, H, T, hd]");
  const int64_t heads = q.size(1), tokens = q.size(2);
  SPECBED_CHECK(hd <= 256 && heads % kv_heads == 0 && tokens <= kTreeAttentionMaxTokens, kKernel,
                ": needs head_dim <= 256 (got ", hd, "), H a multiple of KVH (", heads, ", ",
                kv_heads, ") and T <= ", kTreeAttentionMaxTokens, " (got ", tokens, ")");
  CheckTensor(kKernel, "out", out, {cache.scalar_type()}, {batch, tokens, heads, hd},
              "[B, T, H, hd]");
  CheckTensor(kKernel, "kv_len", kv_len, {at::kLong}, {batch}, "[B]");
  CheckTensor(kKernel, "tree_bits", tree_bits, {at::kLong}, {-1, tokens}, "[B or 1, T]");
  SPECBED_CHECK(tree_bits.size(0) == batch || tree_bits.size(0) == 1, kKernel, ": tree_bits has ",
                tree_bits.size(0), " rows; expected B = ", batch, " or 1");
  CheckSameDevices(kKernel,
                   {{"cache", cache}, {"kv_len", kv_len}, {"tree_bits", tree_bits}, {"out", out}},
                   "q", q);
  TreeAttentionArgs a;
  a.q = q.data_ptr();
  a.k_cache = lc.k;
  a.v_cache = lc.v;
  a.kv_len = kv_len.data_ptr<int64_t>();
  a.tree_bits = tree_bits.data_ptr<int64_t>();
  a.out = out.data_ptr();
  a.bits_batch_stride = tree_bits.size(0) == 1 ? 0 : tokens;
  a.batch = batch;
  a.tokens = tokens;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = hd;
  a.max_len = max_len;
  a.scale = static_cast<float>(scale);
  a.element = ElementOf(kKernel, "q", q);
  const KernelDevice device = DeviceOf(kKernel, "q", q);
  if (device == KernelDevice::kCpu) {
    const int status = cpu::TreeAttention(a);
    SPECBED_CHECK(status != kKernelBadInput, kKernel, ": kv_len + T > max_len = ", max_len,
                  " or a tree bit at or past T = ", tokens);
    CheckKernelStatus(kKernel, device, status);
    return;
  }
  CudaLaunchScope scope(q);
  CheckKernelStatus(kKernel, device, scope.kernels().tree_attention(a, scope.stream()));
}

}  // namespace specbed
