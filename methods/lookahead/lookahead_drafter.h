// The `lookahead` drafter (lookahead decoding, Fu et al., ICML 2024): one verify forward carries
// two branches below the root.
//   verification branch: up to G (N-1)-token continuations from the n-gram pool whose key is the
//     root (the last committed token), merged into a trie; these are the draft candidates.
//   lookahead branch: a window of W columns over N-1 Jacobi levels. With the reference layout
//     (LookaheadLayout) level 1 is a chain of W-1 tokens from the root, column 0's levels
//     2..N-1 hang below the root and column c's below chain token c-1; with own_column level 1
//     is a chain of W tokens and column j's upper levels hang below its own level-1 token. With
//     the tree mask either is the paper's lookahead mask: a token sees the root, the chain up to
//     where its column hangs and its own column's lower levels.
// After the forward, the target's argmax at each column's top level is that column's next Jacobi
// token R[j]; the n-gram (the token the column hangs from, its upper levels, R[j]) enters the
// pool under its first token, and the window moves up one level.
// The drafts are deterministic given the past, so `sample_follow` is lossless at T > 0; the
// lookahead branch is offered to the verifier too (a level-1 token equal to the target's choice
// is accepted like any node; the paper only verifies the pool's candidates).
// Checked by: tests/methods/lookahead_test.cpp.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "harness/engine/method.h"

namespace specbed {

// Where the window's columns hang (README "The window's layout").
enum class LookaheadLayout {
  // hao-ai-lab/LookaheadDecoding: a chain of W-1 level-1 tokens from the root; column 0's N-2
  // upper levels hang below the root, column c's below chain node c-1, so column c's n-gram is
  // keyed on the token before it (the real last token for column 0).
  kReference,
  // Every column's N-2 upper levels hang below its own level-1 node (a chain of W tokens); no
  // n-gram is keyed on the real last token. SpecBed's layout before issue 47.
  kOwnColumn,
};
const char* LookaheadLayoutName(LookaheadLayout layout);
LookaheadLayout ParseLookaheadLayout(const std::string& name, const std::string& context);

struct LookaheadOptions {
  int64_t window = 7;             // W: Jacobi window width (Spec-Bench: 7)
  int64_t level = 5;              // N: n-gram size; the window keeps N-1 levels (Spec-Bench: 5)
  int64_t guess = 7;              // G: most pool candidates verified per step (Spec-Bench: 7)
  bool pool_from_prompt = false;  // the prompt's N-grams, then every committed token's, in the pool
  LookaheadLayout layout = LookaheadLayout::kReference;
};

// Nodes and depth one full step needs: W (N-1) + G (N-1) nodes, depth max(W + N - 2, N - 1).
DraftBudget LookaheadBudget(const LookaheadOptions& options);

// The n-gram pool: key token -> at most G continuations of N-1 tokens, most recent first.
class NgramPool {
 public:
  NgramPool(int64_t continuation_length, int64_t capacity)
      : length_(continuation_length), capacity_(capacity) {}
  // Adds `continuation` (length N-1) under `key`, or moves it to the front if present.
  void Insert(int32_t key, const int32_t* continuation);
  // Continuations under `key`, flattened (count() x N-1), most recent first; nullptr when none.
  const std::vector<int32_t>* Find(int32_t key) const;
  int64_t length() const { return length_; }
  void Clear() { pool_.clear(); }
  int64_t keys() const { return static_cast<int64_t>(pool_.size()); }

 private:
  int64_t length_, capacity_;
  std::unordered_map<int32_t, std::vector<int32_t>> pool_;
};

class LookaheadDrafter final : public Drafter {
 public:
  explicit LookaheadDrafter(const LookaheadOptions& options);

  // Empties the pool (and seeds it from the prompt if asked) and fills every Jacobi level with
  // tokens drawn uniformly from the prompt (seeded by begin.seed).
  void Begin(const DraftBegin& begin) override;
  // Pool candidates first (a trie, depth-clipped), then as many window columns as the remaining
  // budget holds (none when not even one fits).
  void Draft(const DraftStep& step, DraftTree& tree) override;
  // Reads R from Verdict::logits (one top-1 per placed column), grows the pool, moves the window;
  // with pool_from_prompt also adds the N-gram ending at each committed token (the reference).
  void Accept(const DraftTree& tree, const Verdict& verdict) override;
  bool AcceptReadsLogits() const override { return true; }  // learns from every slot

  const NgramPool& pool() const { return pool_; }
  // Jacobi level l (0-based, 0 = oldest) of the window: W tokens.
  const std::vector<int32_t>& level_tokens(int64_t l) const { return levels_[l]; }
  int64_t last_candidates() const { return last_candidates_; }  // pool candidates last step

 private:
  void AddCandidates(int32_t root, int64_t max_nodes, int64_t max_depth, DraftTree& tree);
  void AddWindow(int64_t columns, DraftTree& tree);
  // How many window columns fit `nodes` more nodes and a depth budget of `depth`.
  int64_t ColumnsThatFit(int64_t nodes, int64_t depth) const;
  void AddWindowNgrams();  // each placed column's N-gram into the pool
  void MoveWindow();       // one Jacobi level up: the lowest level leaves, R enters on top
  void AddCommittedNgrams(const std::vector<int32_t>& tokens);

  LookaheadOptions options_;
  NgramPool pool_;
  std::vector<std::vector<int32_t>> levels_;  // [N-1][W]
  std::mt19937_64 rng_;
  int32_t root_ = 0;                // the last tree's root (column 0's key, kReference)
  std::vector<int32_t> history_;    // pool_from_prompt: the last N-1 committed tokens
  int64_t placed_columns_ = 0;      // window columns in the last tree
  std::vector<int32_t> level1_;     // scratch: each placed column's level-1 node
  std::vector<int64_t> top_slots_;  // verify slot of each placed column's top level
  std::vector<int32_t> next_;       // R: argmax at those slots
  std::vector<int32_t> ngram_;      // scratch: one continuation
  int64_t last_candidates_ = 0;
};

}  // namespace specbed
