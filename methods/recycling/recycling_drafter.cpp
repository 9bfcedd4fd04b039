// RecyclingDrafter, its template and adjacency matrix (see recycling_drafter.h).
#include "methods/recycling/recycling_drafter.h"

#include <algorithm>

#include "base/enum_names.h"
#include "base/error.h"
#include "methods/common/logits_rows.h"

namespace specbed {

SPECBED_ENUM_NAMES(RecyclingTemplate, "recycling template", RecyclingTemplateName,
                   ParseRecyclingTemplate, {RecyclingTemplate::kPaper, "paper"},
                   {RecyclingTemplate::kGeometric, "geometric"})

namespace {

std::vector<TemplateNode> TemplateFor(const RecyclingOptions& options) {
  if (options.tree_template == RecyclingTemplate::kGeometric) {
    return BuildRankTemplate(options.tree_nodes, options.top_k);
  }
  SPECBED_CHECK(options.top_k >= 8 && options.tree_nodes <= 80,
                "recycling: the paper's template needs top_k >= 8 (its ranks go to 7) and "
                "tree_nodes <= 80 (its size), got top_k ",
                options.top_k, " and tree_nodes ", options.tree_nodes,
                " (template = geometric takes any)");
  return TokenRecyclingPaperTemplate(options.tree_nodes);
}

}  // namespace

void AdjacencyMatrix::Resize(int64_t vocab, int64_t k) {
  vocab_ = vocab;
  k_ = k;
  ids_.assign(static_cast<size_t>(vocab * k), -1);
  logged_.assign(static_cast<size_t>(vocab), 0);
  log_rows_.clear();
  log_values_.clear();
}

void AdjacencyMatrix::SetRow(int32_t token, const int32_t* ids) {
  int32_t* row = ids_.data() + token * k_;
  if (!logged_[token]) {
    logged_[token] = 1;
    log_rows_.push_back(token);
    log_values_.insert(log_values_.end(), row, row + k_);
  }
  std::copy(ids, ids + k_, row);
}

void AdjacencyMatrix::BeginLog() {
  for (int32_t r : log_rows_) logged_[r] = 0;
  log_rows_.clear();
  log_values_.clear();
}

void AdjacencyMatrix::Undo() {
  for (size_t i = 0; i < log_rows_.size(); ++i) {
    std::copy_n(log_values_.begin() + static_cast<int64_t>(i) * k_, k_,
                ids_.begin() + log_rows_[i] * k_);
  }
  BeginLog();
}

void AdjacencyMatrix::Clear() {
  Resize(vocab_, k_);
}

RecyclingDrafter::RecyclingDrafter(const RecyclingOptions& options)
    : options_(options), template_(TemplateFor(options)) {}

void RecyclingDrafter::Begin(const DraftBegin& begin) {
  SPECBED_CHECK(begin.prompt != nullptr && !begin.prompt->empty(),
                "recycling drafter: empty prompt");
  SPECBED_CHECK(begin.last_logits.defined() && begin.last_logits.dim() == 1,
                "recycling drafter: needs the prefill logits (float32 [vocab])");
  const int64_t vocab = begin.last_logits.size(0);
  SPECBED_CHECK(options_.top_k <= vocab, "recycling: top_k ", options_.top_k,
                " exceeds the vocabulary (", vocab, ")");
  if (matrix_.vocab() != vocab || options_.scope == PersistScope::kNone) {
    matrix_.Resize(vocab, options_.top_k);
  }
  const uint64_t key = HashTokens(*begin.prompt);
  if (have_previous_ && key == last_prompt_hash_) matrix_.Undo();
  matrix_.BeginLog();
  last_prompt_hash_ = key;
  have_previous_ = true;
  TopkRows(begin.last_logits.view({1, vocab}), {0}, options_.top_k, topk_);
  matrix_.SetRow(begin.prompt->back(), topk_.data());
  root_ = begin.root;  // the first step's root (an Accept may come before any Draft: K = 0)
}

void RecyclingDrafter::Draft(const DraftStep& step, DraftTree& tree) {
  root_ = step.root;
  node_of_.assign(template_.size(), -1);
  for (size_t i = 0; i < template_.size() && tree.size() < step.budget.nodes; ++i) {
    const TemplateNode& t = template_[i];
    if (t.depth > step.budget.depth) continue;
    const int32_t parent = t.parent < 0 ? -1 : node_of_[t.parent];
    if (t.parent >= 0 && parent < 0) continue;  // the parent was left out
    const int32_t from = parent < 0 ? root_ : tree.token[parent];
    const int32_t token = matrix_.Row(from)[t.rank];
    if (token >= 0) node_of_[i] = tree.AddNode(token, parent);
  }
}

void RecyclingDrafter::Accept(const DraftTree& tree, const Verdict& verdict) {
  SPECBED_CHECK(verdict.logits.defined(),
                "recycling drafter: the verdict carries no target logits (a decoder other than "
                "SpeculativeDecoder?)");
  const int64_t n = tree.size();
  on_path_.assign(static_cast<size_t>(n), 0);
  for (int32_t node : verdict.path) on_path_[node] = 1;
  rows_.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (!on_path_[i]) rows_.push_back(i + 1);
  }
  rows_.push_back(0);
  for (int32_t node : verdict.path) rows_.push_back(node + 1);
  TopkRows(verdict.logits, rows_, options_.top_k, topk_);
  for (size_t j = 0; j < rows_.size(); ++j) {
    const int64_t slot = rows_[j];
    const int32_t input = slot == 0 ? root_ : tree.token[slot - 1];
    matrix_.SetRow(input, topk_.data() + j * options_.top_k);
  }
  // The next step's root, also when it has no Draft (K = 0).
  if (!verdict.tokens.empty()) root_ = verdict.tokens.back();
}

}  // namespace specbed
