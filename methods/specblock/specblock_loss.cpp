// SpecBlock training loss and the single-position logits used by online adaptation (see
// specblock_trainer.h).
// Checked by: tests/methods/specblock_test.cpp.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <memory>

#include "harness/base/error.h"
#include "methods/specblock/specblock_trainer.h"

namespace specbed {
namespace {

// x[b, idx[b, ...]] along dim 1 for idx int64 [B, ...] (any trailing shape), x [B, T, ...].
at::Tensor GatherRows(const at::Tensor& x, const at::Tensor& idx) {
  const int64_t b = x.size(0);
  const at::Tensor flat = idx.reshape({b, -1});
  std::vector<int64_t> shape = idx.sizes().vec();
  at::Tensor out;
  if (x.dim() == 2) {
    out = x.gather(1, flat);
  } else {
    const int64_t w = x.size(2);
    out = x.gather(1, flat.unsqueeze(-1).expand({b, flat.size(1), w}));
    shape.push_back(w);
  }
  return out.reshape(shape);
}

// m[..., 0] = first; m[..., k + 1] = m[..., k] * hit[..., k]: [.., K + 1].
at::Tensor PrefixMask(const at::Tensor& first, const at::Tensor& hit) {
  return at::cat({first.unsqueeze(-1), hit}, -1).cumprod(-1);
}

}  // namespace

namespace {

// Trunk output [B, T - 1, K, d] of the block-1 training layout: start i is the root at token
// index i + 1 (condition: target features at i), slot k drafts token i + 2 + k; every start sees
// all K slots of earlier starts and the slots <= k of its own block (the served cache layout).
at::Tensor Block1Hidden(const SpecBlockModel& model, const at::Tensor& aux,
                        const at::Tensor& tokens, bool detach_trunk) {
  const int64_t b = tokens.size(0), t = tokens.size(1), k = model.config().block_size;
  const int64_t n1 = t - 1;
  const at::Tensor i = at::arange(n1, at::kLong);
  const at::Tensor kk = at::arange(k, at::kLong);
  const at::Tensor pos = (i.unsqueeze(1) + 1 + kk.unsqueeze(0)).reshape({1, -1}).expand({b, -1});
  const at::Tensor qi = i.repeat_interleave(k), qk = kk.repeat({n1});
  const at::Tensor mask =
      (qi.unsqueeze(1) > qi.unsqueeze(0)) |
      ((qi.unsqueeze(1) == qi.unsqueeze(0)) & (qk.unsqueeze(1) >= qk.unsqueeze(0)));
  std::unique_ptr<at::NoGradGuard> guard;
  if (detach_trunk) guard = std::make_unique<at::NoGradGuard>();
  return model.Trunk(model.Fuse(aux.narrow(1, 0, n1), tokens.narrow(1, 1, n1), true), pos,
                     mask.unsqueeze(0).expand({b, -1, -1}), nullptr, nullptr);
}

}  // namespace

at::Tensor SpecBlockNextTokenLogits(const SpecBlockModel& model, const at::Tensor& aux,
                                    const at::Tensor& tokens, bool detach_trunk,
                                    at::Tensor* rank_logits) {
  const int64_t b = tokens.size(0);
  const at::Tensor h0 = Block1Hidden(model, aux, tokens, detach_trunk).select(2, 0);  // [B,n1,d]
  const at::Tensor logits = model.Logits(h0);
  if (rank_logits != nullptr) {
    *rank_logits = at::cat(
        {at::zeros({b, 1, kSpecBlockBuckets}, logits.options()), model.RankLogits(h0, logits)}, 1);
  }
  return at::cat({at::zeros({b, 1, logits.size(-1)}, logits.options()), logits}, 1);
}

SpecBlockSlotRows SpecBlockSlotsDrafting(const at::Tensor& loss_mask, int64_t block_size) {
  SPECBED_CHECK(
      loss_mask.dim() == 2 && loss_mask.scalar_type() == at::kFloat && loss_mask.device().is_cpu(),
      "specblock: loss mask must be float32 [B, T] on the CPU");
  const at::Tensor m = loss_mask.contiguous();
  const int64_t b = m.size(0), t = m.size(1), n1 = t - 1;
  const float* p = m.data_ptr<float>();
  std::vector<int64_t> slot, seq;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t r = 1; r + 1 < t; ++r) {
      if (p[bi * t + r] == 0) continue;
      for (int64_t k = 0; k < block_size && r - k >= 1; ++k) {
        const int64_t start = r - k - 1;  // layout start of the root at token index r - k
        slot.push_back((bi * n1 + start) * block_size + k);
        seq.push_back(bi * t + r);
      }
    }
  }
  SpecBlockSlotRows rows;
  rows.slot = at::tensor(slot, at::kLong);
  rows.seq = at::tensor(seq, at::kLong);
  return rows;
}

at::Tensor SpecBlockSlotLogits(const SpecBlockModel& model, const at::Tensor& aux,
                               const at::Tensor& tokens, const SpecBlockSlotRows& rows,
                               bool detach_trunk, at::Tensor* rank_logits) {
  const at::Tensor h = Block1Hidden(model, aux, tokens, detach_trunk);
  const at::Tensor hs = h.reshape({-1, h.size(-1)}).index_select(0, rows.slot);  // [N, d]
  const at::Tensor logits = model.Logits(hs);
  if (rank_logits != nullptr) *rank_logits = model.RankLogits(hs, logits);
  return logits;
}

SpecBlockLossResult SpecBlockLoss(const SpecBlockModel& model, const at::Tensor& aux,
                                  const at::Tensor& tokens, const at::Tensor& target_logits,
                                  const at::Tensor& loss_mask, const SpecBlockLossOptions& options,
                                  std::mt19937_64& rng) {
  const SpecBlockConfig& c = model.config();
  const int64_t b = tokens.size(0), t = tokens.size(1), k = c.block_size;
  SPECBED_CHECK(t >= 3, "specblock loss: sequences need >= 3 tokens");
  const int64_t n1 = t - 1, r = n1 * k;
  const at::Tensor i = at::arange(n1, at::kLong).unsqueeze(1);  // [n1, 1]
  const at::Tensor kk = at::arange(k, at::kLong).unsqueeze(0);  // [1, K]
  const at::Tensor target_draft = target_logits.index_select(-1, model.draft_ids());
  const at::Tensor& d2t = model.draft_ids();

  SpecBlockLossResult res;
  res.slot_hits.assign(k, 0);
  res.slot_counts.assign(k, 0);
  at::Tensor draft_total = at::zeros({}, at::kFloat);
  at::Tensor rank_num = at::zeros({}, at::kFloat);
  double rank_den = 0;

  // Per-slot soft CE summed over slots, each normalised by its own weight sum.
  auto block_loss = [&](const at::Tensor& logits, const at::Tensor& teacher, const at::Tensor& w) {
    const at::Tensor ce = -(teacher * at::log_softmax(logits, -1)).sum(-1);  // [B, n1, K]
    const at::Tensor num = (ce * w).sum(at::IntArrayRef{0, 1});              // [K]
    at::Tensor den = w.sum(at::IntArrayRef{0, 1});
    if (options.slot_norm_floor > 0) {
      den = at::maximum(den, den.narrow(0, 0, 1) * options.slot_norm_floor);
    }
    return (num / den.clamp_min(1.0)).sum();
  };
  auto rank_term = [&](const at::Tensor& h, const at::Tensor& logits, const at::Tensor& labels,
                       const at::Tensor& w, bool confusion) {
    const at::Tensor rl = model.RankLogits(h, logits);
    const at::Tensor bucket = SpecBlockBucketLabels(logits, labels, model);
    const at::Tensor ce =
        at::cross_entropy_loss(rl.reshape({-1, kSpecBlockBuckets}), bucket.reshape({-1}), {},
                               at::Reduction::None, -100)
            .view(w.sizes());
    rank_num = rank_num + (ce * w).sum();
    rank_den += w.sum().item<double>();
    if (confusion) {
      const at::Tensor pred = rl.argmax(-1).reshape({-1});
      const at::Tensor tb = bucket.reshape({-1});
      const at::Tensor sel = w.reshape({-1}).gt(0);
      const at::Tensor cell = (tb * 4 + pred).masked_select(sel);
      const at::Tensor counts = at::bincount(cell, {}, 16);
      for (int a = 0; a < 4; ++a)
        for (int p = 0; p < 4; ++p) res.confusion[a][p] += counts[a * 4 + p].item<double>();
    }
  };

  // Block 1.
  const at::Tensor pos1 = (i + 1 + kk).reshape({1, r}).expand({b, r});
  const at::Tensor li1 = (i + 2 + kk).expand({n1, k});  // label index
  const at::Tensor ti1 = li1 - 1;                       // teacher index
  const at::Tensor in1 = li1.lt(t);
  const at::Tensor li1c = li1.clamp_max(t - 1).unsqueeze(0).expand({b, n1, k});
  const at::Tensor ti1c = ti1.clamp_max(t - 1).unsqueeze(0).expand({b, n1, k});
  const at::Tensor valid1 = GatherRows(loss_mask, ti1c) * in1.unsqueeze(0).to(at::kFloat);
  const at::Tensor qi = at::arange(n1, at::kLong).repeat_interleave(k);
  const at::Tensor qk = at::arange(k, at::kLong).repeat({n1});
  const at::Tensor mask1 =
      ((qi.unsqueeze(1) > qi.unsqueeze(0)) |
       ((qi.unsqueeze(1) == qi.unsqueeze(0)) & (qk.unsqueeze(1) >= qk.unsqueeze(0))))
          .unsqueeze(0)
          .expand({b, r, r});
  SpecBlockKv kv1;
  const at::Tensor h1 = model.Trunk(model.Fuse(aux.narrow(1, 0, n1), tokens.narrow(1, 1, n1), true),
                                    pos1, mask1, nullptr, &kv1);
  const at::Tensor logits1 = model.Logits(h1);  // [B, n1, K, Vd]
  const at::Tensor labels1 = GatherRows(tokens, li1c);
  const at::Tensor teacher1 = at::softmax(GatherRows(target_draft, ti1c), -1);
  at::Tensor hit1;
  {
    at::NoGradGuard no_grad;
    hit1 = d2t.index_select(0, logits1.argmax(-1).reshape({-1})).view(labels1.sizes()).eq(labels1);
    hit1 = hit1.to(at::kFloat) * valid1;
  }
  const at::Tensor m1 =
      options.valid_prefix ? PrefixMask(at::ones({b, n1}), hit1) : at::ones({b, n1, k + 1});
  const at::Tensor w1 = m1.narrow(-1, 0, k) * valid1;
  draft_total = draft_total + block_loss(logits1, teacher1, w1);
  {
    const at::Tensor hs = (hit1 * valid1).sum(at::IntArrayRef{0, 1}),
                     cs = valid1.sum(at::IntArrayRef{0, 1});
    for (int64_t s = 0; s < k; ++s) {
      res.slot_hits[s] = hs[s].item<double>();
      res.slot_counts[s] = cs[s].item<double>();
    }
  }
  if (options.rank) rank_term(h1, logits1, labels1, w1, true);

  // Block 2 (cross-block chaining from a random split point s per start).
  if (options.blocks >= 2) {
    at::Tensor s = at::empty({b, n1}, at::kLong);
    int64_t* sp = s.data_ptr<int64_t>();
    for (int64_t x = 0; x < b * n1; ++x) sp[x] = 1 + static_cast<int64_t>(rng() % k);
    const at::Tensor cond2 =
        h1.gather(2, (s - 1).view({b, n1, 1, 1}).expand({b, n1, 1, c.hidden_size})).squeeze(2);
    const at::Tensor start2 = i.view({1, n1}) + 1 + s;  // token index of the block-2 start
    const at::Tensor tok2 = GatherRows(tokens, start2.clamp_max(t - 1));
    const at::Tensor pos2 = (start2.unsqueeze(-1) + kk.view({1, 1, k})).reshape({b, r});
    const at::Tensor li2 = start2.unsqueeze(-1) + 1 + kk.view({1, 1, k});
    const at::Tensor ti2 = li2 - 1;
    const at::Tensor valid2 =
        GatherRows(loss_mask, ti2.clamp_max(t - 1)) * li2.lt(t).to(at::kFloat);
    // Keys: block-1 rows (context of starts < i, slots (i, < s)) then block-2 rows (causal).
    const at::Tensor s_row = s.repeat_interleave(k, 1);  // [B, r] split of each query row
    const at::Tensor ctx = (qi.unsqueeze(1) > qi.unsqueeze(0)).unsqueeze(0) |
                           ((qi.unsqueeze(1) == qi.unsqueeze(0)).unsqueeze(0) &
                            (qk.view({1, 1, r}) < s_row.unsqueeze(2)));
    const at::Tensor own =
        ((qi.unsqueeze(1) == qi.unsqueeze(0)) & (qk.unsqueeze(1) >= qk.unsqueeze(0)))
            .unsqueeze(0)
            .expand({b, r, r});
    const at::Tensor mask2 = at::cat({ctx.expand({b, r, r}), own}, 2);
    const at::Tensor h2 = model.Trunk(model.Fuse(cond2, tok2, false), pos2, mask2, &kv1, nullptr);
    const at::Tensor logits2 = model.Logits(h2);
    const at::Tensor labels2 = GatherRows(tokens, li2.clamp_max(t - 1));
    const at::Tensor teacher2 = at::softmax(GatherRows(target_draft, ti2.clamp_max(t - 1)), -1);
    at::Tensor hit2;
    {
      at::NoGradGuard no_grad;
      hit2 =
          d2t.index_select(0, logits2.argmax(-1).reshape({-1})).view(labels2.sizes()).eq(labels2);
      hit2 = hit2.to(at::kFloat) * valid2;
    }
    const at::Tensor first2 = m1.gather(2, s.unsqueeze(-1)).squeeze(-1);
    const at::Tensor m2 =
        options.valid_prefix ? PrefixMask(first2, hit2) : at::ones({b, n1, k + 1});
    const at::Tensor w2 = m2.narrow(-1, 0, k) * valid2;
    draft_total = draft_total + block_loss(logits2, teacher2, w2);
    if (options.rank) rank_term(h2, logits2, labels2, w2, false);
  }
  res.draft_loss = draft_total.item<double>();
  at::Tensor loss = draft_total;
  if (options.rank && rank_den > 0) {
    const at::Tensor rl = rank_num / rank_den;
    res.rank_loss = rl.item<double>();
    loss = loss + rl;
  }
  res.loss = loss;
  return res;
}

}  // namespace specbed
