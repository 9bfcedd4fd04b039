// EAGLE-3's beam tree grown on the head's device (the GPU step's "static frontier"; the step
// program is described in docs/ARCHITECTURE.md): every layer of
// BeamTreeBuilder's expansion runs as device ops with no host read, and the candidates reach the
// host in one copy per step, where BeamTreeBuilder::BuildFromCandidates keeps the budget.
//
// Per layer d >= 2, with k = top_k (every layer's frontier has exactly k nodes, so the shapes
// depend only on (layers, k) and the context length):
//   beam      = the k best candidates of layer d-1 by score (stable sort: equal scores keep the
//               earlier candidate first, as BeamTreeBuilder's SelectBeam);
//   head rows = k rows: feature = the output hidden of the row that produced the node (the
//               root's for layer 2), token = the node's, position = context_len - 1 + (d - 1),
//               allowed = the context, the node's ancestors' rows and its own (the parent row's
//               tree mask gathered, then the identity), appended at cache rows
//               [context_len + (d-2) k, context_len + (d-1) k);
//   children  = per row, the k highest draft logits (stable sort: equal logits keep the smaller
//               draft id first, as Eagle3Drafter's host TopK), log-prob = logit - logsumexp
//               (clamped to <= 0), score = parent score + log-prob, target id via d2t.
// Layer 1 is the root's k children from the root's logits. Candidate order is BeamTreeBuilder's
// (layer, then frontier rank, then child rank), so on the same logits the tree equals the host
// path's bit for bit.
// Every grow is a batch (Grow = a batch of one): the trees of a batch's sequences grow in lockstep
// (GrowBatch), each layer's beam sort, gathers, head forward and children's top-k one op over all
// of them (attention per sequence, against its own cache).
// Checked by: tests/methods/eagle3_drafter_test.cpp (Eagle3DeviceFrontier.*: trees equal to the
// host path's step by step, one download per step, exact vs AR; GrowBatch's trees equal Grow's
// with one head forward a layer) and tests/methods/batch_engine_test.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "methods/eagle3/eagle3_head.h"

namespace specbed {

class Eagle3DeviceFrontier {
 public:
  // One sequence's tree to grow (GrowBatch): `layers` (>= 1) layers of `top_k` children per
  // frontier node below the root.
  //   head         on the ATen path; its cache holds the context_len context rows (root last).
  //   root_hidden  [1, H] head dtype and device: the root row's output hidden.
  //   root_logits  float32 [1, Vd] head device: the root row's draft logits.
  //   out          the head's output rows (scratch; the last layer's rows on return).
  struct Job {
    Eagle3DeviceFrontier* frontier = nullptr;
    Eagle3Head* head = nullptr;
    at::Tensor root_hidden, root_logits;
    int64_t context_len = 0, layers = 0, top_k = 0;
    Eagle3HeadOutput* out = nullptr;
  };

  // Grows the job's tree (job.frontier is ignored: this frontier grows it). Leaves
  // (layers - 1) * top_k tree rows in the head's cache (the caller truncates). One
  // device-to-host copy (of every candidate) at the end.
  void Grow(Eagle3Head& head, const at::Tensor& root_hidden, const at::Tensor& root_logits,
            int64_t context_len, int64_t layers, int64_t top_k, Eagle3HeadOutput& out);
  // Grows every job's tree (distinct frontiers, heads over one Eagle3Weights, one top_k) layer
  // by layer in lockstep, as batched device ops: per layer one beam sort over every sequence
  // still growing, one head forward for all of their rows (Eagle3Head::ForwardBatch: attention
  // per sequence against its own cache), one top-k of all their rows' children; one download of
  // every sequence's candidates at the end. Each tree is the one Grow makes on the same logits
  // (the batch's logits are within rounding of each sequence's own).
  static void GrowBatch(const std::vector<Job>& jobs);

  // After Grow: the top_k + (layers - 1) top_k^2 candidates in BeamTreeBuilder's candidate order:
  // target token ids, parent candidate indices (-1 = the root), per-node log-probs, cumulative
  // log-probs.
  int64_t size() const { return size_; }
  const int32_t* tokens() const { return host_.data_ptr<int32_t>(); }
  const int32_t* parents() const { return tokens() + size_; }
  const float* logp() const { return reinterpret_cast<const float*>(tokens() + 2 * size_); }
  const float* scores() const { return reinterpret_cast<const float*>(tokens() + 3 * size_); }

 private:
  // One copy of the batch's candidates (int32 [c, 4, total] on the device) to the host, each
  // job's into its frontier.
  static void Download(const std::vector<Job>& jobs, const at::Tensor& packed);

  at::Tensor packed_;  // the batch's candidates (GrowBatch's first job's frontier keeps it)
  at::Tensor host_;    // int32 [4, size_] CPU, contiguous (after the download)
  int64_t size_ = 0;
};

}  // namespace specbed
