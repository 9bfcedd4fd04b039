// The decoder factory shared by the methods drafting with a DFlash-layout head: `dflash`, `ddtree`
// (methods/dflash/dflash_method.cpp) and `jetspec` (methods/jetspec/jetspec_method.cpp), and the
// two node-budget conventions of the tree methods.
// Checked by: tests/methods/dflash_drafter_test.cpp, tests/methods/jetspec_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "methods/dflash/dflash_drafter.h"
#include "methods/method_registry.h"

namespace specbed {

// Values of the tree methods' `budget_convention` knob.
inline constexpr const char* kBudgetConventionDdtree = "ddtree";    // budget = drafted nodes
inline constexpr const char* kBudgetConventionJetspec = "jetspec";  // budget = verify tokens

// Drafted nodes (root excluded) for a node `budget` (>= 1) under `convention`: "ddtree" counts
// drafted nodes, root excluded (DDTree's tree_budget: budget + 1 verify tokens); "jetspec" counts
// every verify token including the root (JetSpec's repo: budget − 1 drafted nodes). Throws
// specbed::Error naming `method` for another convention or a budget < 1.
int64_t DraftedNodesForBudget(int64_t budget, const std::string& convention,
                              const std::string& method);

// Throws specbed::Error naming `method` unless knobs["drafter"] names an existing directory.
void CheckDflashDrafterKnob(const nlohmann::json& knobs, const std::string& method);

// Registers a DFlash-family method described by `info` (DescribeMethod): its validate checks the
// `drafter` knob, its factory is MakeDflashFamilyDecoder with `kind`, both naming info.name.
void RegisterDflashFamilyMethod(MethodRegistry& registry, MethodInfo info, DflashTreeKind kind);

// Knobs the tree methods share: `budget_convention` with `first` (a kBudgetConvention*) as the
// default and listed first; `block_size` of a tree (depth <= block_size - 1).
MethodKnob BudgetConventionKnob(const std::string& first);
MethodKnob TreeBlockSizeKnob();

// The SpeculativeDecoder of a DFlash-family method for one case. Resolved knobs read: `drafter`,
// `block_size`; for trees also `budget`, `budget_convention` and `top_k` (kBestFirst) or `width`
// (kGroupExpand). Chains verify with chain_rs at T > 0, trees with sample_follow. Throws
// specbed::Error when the head does not fit the target (vocabulary, hidden size, layers).
std::unique_ptr<Decoder> MakeDflashFamilyDecoder(MethodContext& context,
                                                 const nlohmann::json& knobs, DflashTreeKind kind,
                                                 const std::string& method);

}  // namespace specbed
