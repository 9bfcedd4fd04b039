// TopkRows (see logits_rows.h).
#include "methods/common/logits_rows.h"

#include <ATen/ATen.h>

#include "base/error.h"
#include "harness/engine/verifier.h"
#include "kernels/engine_counters.h"

namespace specbed {
namespace {

// One pass over a row keeping the k best (value, id) pairs sorted, best first: O(vocab) compares
// plus O(k) per insertion.
void TopkRow(const float* row, int64_t vocab, int64_t k, int32_t* ids, float* vals) {
  int64_t n = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const float x = row[v];
    if (n == k && !(x > vals[k - 1])) continue;  // a tie keeps the lower id already there
    int64_t j = n < k ? n++ : k - 1;
    while (j > 0 && x > vals[j - 1]) {
      vals[j] = vals[j - 1];
      ids[j] = ids[j - 1];
      --j;
    }
    vals[j] = x;
    ids[j] = static_cast<int32_t>(v);
  }
}

}  // namespace

void TopkRows(const at::Tensor& logits, const std::vector<int64_t>& rows, int64_t k,
              std::vector<int32_t>& out) {
  SPECBED_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.is_contiguous(),
                "TopkRows: logits must be contiguous float32 [rows, vocab], got ", logits.sizes(),
                " ", logits.scalar_type());
  const int64_t n_rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  SPECBED_CHECK(k >= 1 && k <= vocab, "TopkRows: k = ", k, " outside [1, ", vocab, "]");
  for (int64_t r : rows) {
    SPECBED_CHECK(r >= 0 && r < n_rows, "TopkRows: row ", r, " outside [0, ", n_rows, ")");
  }
  const int64_t m = static_cast<int64_t>(rows.size());
  out.resize(static_cast<size_t>(m * k));
  if (m == 0) return;
  if (logits.device().is_cpu()) {  // counted as the device path's upload and download
    const TransferScope upload(Transfer::kHostToDevice), download(Transfer::kDeviceToHost);
    std::vector<float> vals(static_cast<size_t>(k));
    const float* base = logits.data_ptr<float>();
    for (int64_t i = 0; i < m; ++i) {
      TopkRow(base + rows[i] * vocab, vocab, k, out.data() + i * k, vals.data());
    }
    return;
  }
  at::Tensor index = [&] {
    const TransferScope upload(Transfer::kHostToDevice);
    return at::tensor(rows, at::kLong).to(logits.device(), /*non_blocking=*/true);
  }();
  at::Tensor picked = logits.index_select(0, index);
  at::Tensor ids = k == 1 ? picked.argmax(-1, /*keepdim=*/true)
                          : std::get<1>(picked.topk(k, -1, /*largest=*/true, /*sorted=*/true));
  const at::Tensor host = CopyToHost(ids.to(at::kInt));
  std::copy(host.data_ptr<int32_t>(), host.data_ptr<int32_t>() + m * k, out.begin());
}

}  // namespace specbed
