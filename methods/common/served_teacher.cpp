// The served-teacher record of the online adapters (see served_teacher.h).
// Checked by: tests/methods/served_teacher_test.cpp.
#include "methods/common/served_teacher.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "base/error.h"

namespace specbed {

void ServedTeacher::Begin(const DraftBegin& begin) {
  hidden_.clear();
  positions_.clear();
  rows_.clear();
  // at::cat writes a fresh tensor: no view of the target's buffers is kept.
  if (!begin.hidden.empty()) hidden_.push_back(at::cat(begin.hidden, -1).select(0, 0));
}

void ServedTeacher::Observe(const Verdict& verdict, bool supervise, int64_t bonus_index) {
  if (!verdict.hidden.empty()) hidden_.push_back(at::cat(verdict.hidden, -1).select(0, 0));
  if (!supervise) return;
  SPECBED_CHECK(verdict.logits.defined(),
                "online adapter: the verifier kept no logits (a decoder that verifies otherwise)");
  const int64_t slot = verdict.path.empty() ? 0 : verdict.path.back() + 1;
  positions_.push_back(bonus_index);
  rows_.push_back(verdict.logits[slot].clone());  // a view of the target's reused output buffer
}

ServedRequest ServedTeacher::Finish(const std::vector<int32_t>& committed,
                                    int64_t max_tokens) const {
  ServedRequest r;
  const int64_t n = static_cast<int64_t>(committed.size());
  const int64_t first = max_tokens == 0 ? 0 : std::max<int64_t>(0, n - max_tokens);
  r.tokens.assign(committed.begin() + first, committed.end());
  for (size_t i = 0; i < positions_.size(); ++i) {
    const int64_t p = positions_[i];
    if (p - 1 >= first && p < n) {
      r.supervised.push_back(p - first);
      r.teacher.push_back(rows_[i]);
    }
  }
  if (!hidden_.empty()) {
    const at::Tensor all = hidden_.size() == 1 ? hidden_[0] : at::cat(hidden_, 0);
    // Rows 0..n-2 were forwarded (a stop rule may have cut the last step's tokens short).
    const int64_t rows = std::min<int64_t>(all.size(0), n - 1);
    r.features = at::zeros({n - first, all.size(1)}, all.options());
    if (rows > first)
      r.features.narrow(0, 0, rows - first).copy_(all.narrow(0, first, rows - first));
  }
  return r;
}

OnlineBatch BuildOnlineBatch(const std::vector<ServedRequest>& requests, const at::Device& device) {
  OnlineBatch b;
  const int64_t nb = static_cast<int64_t>(requests.size());
  int64_t t = 0;
  for (const ServedRequest& r : requests) t = std::max<int64_t>(t, r.tokens.size());
  // The index layout on the host, uploaded once each below (the same tensors on the CPU).
  at::Tensor tokens = at::zeros({nb, t}, at::kLong);
  at::Tensor lengths = at::empty({nb}, at::kLong);
  b.host_loss_mask = at::zeros({nb, t}, at::kFloat);
  b.host_teacher_index = at::full({nb, t}, -1, at::kLong);
  const bool with_features = nb > 0 && requests[0].features.defined();
  if (with_features) {
    b.features = at::zeros({nb, t, requests[0].features.size(1)},
                           at::TensorOptions().dtype(at::kFloat).device(device));
  }
  int64_t* tok = tokens.data_ptr<int64_t>();
  float* mask = b.host_loss_mask.data_ptr<float>();
  int64_t* index = b.host_teacher_index.data_ptr<int64_t>();
  std::vector<std::pair<int64_t, const at::Tensor*>> rows;  // (flat position, row)
  for (int64_t i = 0; i < nb; ++i) {
    const ServedRequest& r = requests[i];
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    for (int64_t j = 0; j < n; ++j) tok[i * t + j] = r.tokens[j];
    lengths.data_ptr<int64_t>()[i] = n;
    for (size_t k = 0; k < r.supervised.size(); ++k) {
      const int64_t flat = i * t + r.supervised[k] - 1;
      if (mask[flat] == 0.f) rows.emplace_back(flat, &r.teacher[k]);
      mask[flat] = 1.f;
    }
    // Device to device, converted to float32 there (a plain copy on the CPU).
    if (with_features) b.features[i].narrow(0, 0, n).copy_(r.features);
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<at::Tensor> ordered;
  for (size_t k = 0; k < rows.size(); ++k) {
    index[rows[k].first] = static_cast<int64_t>(k);
    ordered.push_back(*rows[k].second);
  }
  if (!ordered.empty()) b.teacher_rows = at::stack(ordered).to(device, at::kFloat).contiguous();
  b.tokens = tokens.to(device);
  b.lengths = lengths.to(device);
  b.loss_mask = b.host_loss_mask.to(device);
  b.teacher_index = b.host_teacher_index.to(device);
  return b;
}

at::Tensor TeacherRowsAt(const OnlineBatch& batch, const at::Tensor& mask) {
  SPECBED_CHECK(mask.is_cpu(), "online batch: TeacherRowsAt takes a host mask (got one on ",
                mask.device(), ")");
  const at::Tensor flat = mask.reshape(-1).nonzero().reshape(-1);
  return TeacherRowsAtFlat(batch, flat);
}

at::Tensor TeacherRowsAtFlat(const OnlineBatch& batch, const at::Tensor& flat) {
  SPECBED_CHECK(flat.is_cpu(), "online batch: TeacherRowsAtFlat takes host indices (got them on ",
                flat.device(), ")");
  // The check reads the host layout: no device-to-host copy.
  const at::Tensor rows = batch.host_teacher_index.reshape(-1).index_select(0, flat);
  SPECBED_CHECK(rows.numel() == 0 || rows.min().item<int64_t>() >= 0,
                "online batch: a teacher row was asked at a position that was not supervised");
  if (rows.numel() == 0) {
    const int64_t v = batch.teacher_rows.defined() ? batch.teacher_rows.size(1) : 0;
    return at::zeros({0, v}, at::TensorOptions().dtype(at::kFloat).device(batch.device()));
  }
  return batch.teacher_rows.index_select(0, rows.to(batch.device()));
}

}  // namespace specbed
