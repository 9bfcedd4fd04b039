// The `recycling` drafter (Token Recycling, Luo et al., ACL 2025, "Turning Trash into Treasure"):
// an adjacency matrix M[vocab, top_k] holds, for every token, the top-k next tokens of the most
// recent target logits where that token was an input; a step drafts a tree from the root by
// walking a static template (node = the r-th successor of its parent's token) through M; after
// the verify forward, every slot's row of M (accepted or rejected) is overwritten with that
// slot's top-k. No model: the drafts are deterministic, so `sample_follow` is lossless at T > 0.
// Checked by: tests/methods/recycling_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/engine/method.h"
#include "methods/common/persist_scope.h"
#include "methods/common/rank_template.h"

namespace specbed {

// M[vocab, k] with an undo log of the current request's writes (the first old value of every row
// written since BeginLog), so a request can be taken back.
class AdjacencyMatrix {
 public:
  AdjacencyMatrix() = default;
  void Resize(int64_t vocab, int64_t k);  // every row empty (-1)
  int64_t vocab() const { return vocab_; }
  int64_t k() const { return k_; }
  // Row of `token`: k ids, best first; -1 = no successor known. token in [0, vocab).
  const int32_t* Row(int32_t token) const { return ids_.data() + token * k_; }
  void SetRow(int32_t token, const int32_t* ids);
  void BeginLog();  // forget the undo log (the current request's writes become permanent)
  void Undo();      // restore every row written since BeginLog
  void Clear();     // every row empty, no log

 private:
  int64_t vocab_ = 0, k_ = 0;
  std::vector<int32_t> ids_;
  std::vector<uint8_t> logged_;      // [vocab]: the row's old value is in the log
  std::vector<int32_t> log_rows_;    // rows written since BeginLog, first write order
  std::vector<int32_t> log_values_;  // their old values, k per row
};

// The static template a step walks (README "The template").
enum class RecyclingTemplate {
  kPaper,      // the paper's published tree (Figure 5): 80 nodes, 6 deep, ranks below 8
  kGeometric,  // the tree_nodes most likely rank paths under a geometric prior (BuildRankTemplate)
};
const char* RecyclingTemplateName(RecyclingTemplate kind);
RecyclingTemplate ParseRecyclingTemplate(const std::string& name, const std::string& context);

struct RecyclingOptions {
  int64_t top_k = 8;        // successors kept per token (the paper's k)
  int64_t tree_nodes = 80;  // template nodes (kPaper: its first tree_nodes, at most 80)
  RecyclingTemplate tree_template = RecyclingTemplate::kPaper;
  // kDataset: M carries over from one request to the next (the paper's hot start); kNone: M
  // starts empty for every request.
  PersistScope scope = PersistScope::kDataset;
};

class RecyclingDrafter final : public Drafter {
 public:
  explicit RecyclingDrafter(const RecyclingOptions& options);

  // Sizes M on the first request (vocab from begin.last_logits); with scope kNone clears it; a
  // request repeating the previous request's prompt (the runner's warmup, repeats) first takes
  // back that request's writes, so an answer never drafts from its own earlier run. Then
  // M[last prompt token] = top-k of the prefill logits.
  void Begin(const DraftBegin& begin) override;
  // Walks the template from step.root through M: at most budget.nodes nodes, none deeper than
  // budget.depth; a node whose entry is empty is left out with its subtree.
  void Draft(const DraftStep& step, DraftTree& tree) override;
  // M[input token of slot s] = top-k of the target logits at slot s for every verify slot
  // (Verdict::logits): drafted-but-rejected slots first, then the root and the accepted path, so
  // the committed context's rows win.
  void Accept(const DraftTree& tree, const Verdict& verdict) override;
  bool AcceptReadsLogits() const override { return true; }  // learns from every slot

  const AdjacencyMatrix& matrix() const { return matrix_; }
  const std::vector<TemplateNode>& tree_template() const { return template_; }

 private:
  RecyclingOptions options_;
  std::vector<TemplateNode> template_;
  AdjacencyMatrix matrix_;
  uint64_t last_prompt_hash_ = 0;
  bool have_previous_ = false;
  int32_t root_ = -1;             // the last Draft's root (slot 0's input token)
  std::vector<int32_t> node_of_;  // template node -> tree node (-1 = left out)
  std::vector<int64_t> rows_;     // verify slots whose rows are written, in write order
  std::vector<int32_t> topk_;     // their top-k ids
  std::vector<uint8_t> on_path_;  // [tree size]: node on the accepted path
};

}  // namespace specbed
