// The drafter heads' ATen ops (see head_aten.h).
#include "methods/common/head_aten.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "kernels/engine_counters.h"
#include "methods/common/head_kernels.h"
#include "models/device.h"
#include "models/llama_model.h"
#include "models/tensor_util.h"

namespace specbed {

HeadPlacement ResolveHeadPlacement(const at::Device& device, at::ScalarType dtype) {
  HeadPlacement p;
  p.device = device;
  p.aten = ResolveForwardPath(ForwardPath::kAuto, device) == ForwardPath::kAten;
  p.dtype = p.aten ? dtype : at::kFloat;
  return p;
}

HeadPlacement TargetHeadPlacement(const LlamaModel& target) {
  return ResolveHeadPlacement(target.device(), target.dtype());
}

at::Tensor PlaceWeight(const at::Tensor& t, const HeadPlacement& placement) {
  return t.to(placement.device, placement.dtype).contiguous();
}

at::Tensor PlaceNormWeight(const at::Tensor& t, const HeadPlacement& placement) {
  return t.to(placement.device, at::kFloat).contiguous();
}

at::Tensor RmsNormRowsAten(const at::Tensor& x, const at::Tensor& w, double eps) {
  return RmsNormLastDimAten(x, w, eps);
}

at::Tensor RotateHalfRopeAten(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RotateHalfAten(x, cos.unsqueeze(1), sin.unsqueeze(1));  // [n, 1, half]
}

at::Tensor MaskedGqaAttentionAten(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& allowed, double scale) {
  const int64_t n = q.size(0), heads = q.size(1), hd = q.size(2);
  const int64_t kv_heads = k.size(0), slots = k.size(1), group = heads / kv_heads;
  SPECBED_CHECK(group * kv_heads == heads && allowed.size(0) == n && allowed.size(1) == slots,
                "MaskedGqaAttentionAten: q ", q.sizes(), ", k ", k.sizes(), ", allowed ",
                allowed.sizes(), " do not fit (internal error)");
  // [n, heads, hd] -> [kv_heads, group * n, hd]: head h = kv * group + g.
  const at::Tensor qg =
      q.view({n, kv_heads, group, hd}).permute({1, 2, 0, 3}).reshape({kv_heads, group * n, hd});
  at::Tensor scores = at::bmm(qg, k.transpose(1, 2)).to(at::kFloat).mul_(scale);
  scores = scores.view({kv_heads, group, n, slots});
  scores.masked_fill_(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  at::Tensor probs = at::softmax(scores, -1);
  // softmax over no allowed slot is NaN: such rows attend to nothing.
  probs.masked_fill_(allowed.any(-1, /*keepdim=*/true).logical_not(), 0.0);
  const at::Tensor out =
      at::bmm(probs.to(q.scalar_type()).view({kv_heads, group * n, slots}), v);  // [kv, g*n, hd]
  return out.view({kv_heads, group, n, hd}).permute({2, 0, 1, 3}).reshape({n, heads * hd});
}

at::Tensor CausalAllowedAten(int64_t n, int64_t past, const at::Device& device) {
  const auto opts = at::TensorOptions(at::kLong).device(device);
  const at::Tensor slot = at::arange(past + n, opts).unsqueeze(0);        // [1, S]
  const at::Tensor last = at::arange(past, past + n, opts).unsqueeze(1);  // [n, 1]
  return slot.le(last);
}

at::Tensor SwiGluAten(const at::Tensor& gate_up) {
  const int64_t inter = gate_up.size(-1) / 2;
  return at::silu(gate_up.narrow(-1, 0, inter)) * gate_up.narrow(-1, inter, inter);
}

void DeviceRopeTable::Ensure(const std::vector<double>& inv_freq, int64_t max_position,
                             const at::Device& device) {
  if (max_position <= host_capacity_ && cos_.defined() && SameDevice(cos_.device(), device)) return;
  GrowRopeTable(inv_freq, max_position, host_cos_, host_sin_, host_capacity_);  // the row path's
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  const auto f32 = at::TensorOptions(at::kFloat);
  cos_ = at::from_blob(host_cos_.data(), {host_capacity_, half}, f32)
             .to(device, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  sin_ = at::from_blob(host_sin_.data(), {host_capacity_, half}, f32)
             .to(device, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

void DownloadTopKLogProbs(const at::Tensor& logits, int64_t k, const at::Tensor& id_map,
                          int32_t* ids, float* logp) {
  const int64_t n = logits.size(0);
  const at::Tensor log_z = at::logsumexp(logits, -1, /*keepdim=*/true);
  const auto [values, index] = at::topk(logits, k, -1, /*largest=*/true, /*sorted=*/true);
  const at::Tensor lp = (values - log_z).clamp_max(0.0).flatten();
  const at::Tensor id =
      id_map.defined() ? id_map.index_select(0, index.flatten()) : index.flatten();
  const at::Tensor host = at::cat({id.to(at::kInt), lp.view(at::kInt)}).cpu();  // one download
  std::memcpy(ids, host.data_ptr<int32_t>(), sizeof(int32_t) * n * k);
  std::memcpy(logp, host.data_ptr<int32_t>() + n * k, sizeof(float) * n * k);
}

void HostStaging::Resize(int64_t n_int64, int64_t n_bytes) {
  n_int64_ = n_int64;
  n_bytes_ = n_bytes;
  const size_t need = static_cast<size_t>(8 * n_int64 + n_bytes);
  if (host_.size() < need) host_.resize(need);
}

std::pair<at::Tensor, at::Tensor> HostStaging::Upload(const at::Device& device) {
  const TransferScope transfer(Transfer::kHostToDevice);
  const at::Tensor host =
      at::from_blob(host_.data(), {8 * n_int64_ + n_bytes_}, at::TensorOptions(at::kByte));
  const at::Tensor staged = device.is_cpu() ? host : host.to(device);
  return {staged.narrow(0, 0, 8 * n_int64_).view(at::kLong),
          staged.narrow(0, 8 * n_int64_, n_bytes_)};
}

}  // namespace specbed
