// Registry of decoding methods: name -> description, traits, knobs (with defaults and ranges) and
// a factory that assembles the method's Decoder (harness/engine/method.h) for one case.
// Registration is explicit (RegisterBuiltinMethods, called by the runner and the CLI) — no
// static-initialization magic. Unknown names fail with the list of known ones and the nearest
// match; unknown knobs, wrong types and out-of-range values fail naming the method and knob.
// The runner branches on traits, never on method names.
// Checked by: tests/engine/speculative_test.cpp (MethodRegistry.*), tests/cli/cli_test.cpp
// (`specbed list methods`).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "harness/engine/method.h"
#include "models/model_registry.h"

namespace specbed {

struct MethodKnob {
  MethodKnob() = default;
  MethodKnob(std::string knob_name, nlohmann::json default_json, std::string text,
             double range_min = 1, double range_max = 0, std::vector<std::string> allowed = {},
             std::string family = "")
      : name(std::move(knob_name)),
        default_value(std::move(default_json)),
        description(std::move(text)),
        min(range_min),
        max(range_max),
        choices(std::move(allowed)),
        drafter_family(std::move(family)) {}

  std::string name;
  nlohmann::json default_value;
  std::string description;
  // Numeric knobs: inclusive range (checked by ResolveKnobs); ignored when min > max.
  double min = 1, max = 0;
  // String knobs: allowed values (empty = any).
  std::vector<std::string> choices;
  // Drafter knobs: the drafter family (models/drafter_catalog.h: "draft", "eagle3", "dflash",
  // "jetspec", "blockpilot"); the value "auto" resolves to the target's shipped drafter of this
  // family (ResolveKnobsFor). "" = not a drafter knob.
  std::string drafter_family;
};

// Capabilities the runner and reports rely on (stored with every case).
struct MethodTraits {
  bool speculative = false;            // drafts and verifies (false: plain AR)
  bool lossless = true;                // output distribution equals the target's (exact at T = 0)
  bool tree = false;                   // drafts trees (vs. chains)
  bool needs_drafter = false;          // needs a separate draft model / head
  bool needs_draft_probs = false;      // its sampling verifier needs per-slot draft distributions
  bool needs_target_hidden = false;    // the drafter reads target hidden states
  bool supports_batch = false;         // batch > 1
  bool trains_online = false;          // an Adapter updates the drafter while decoding
  bool overlaps_verification = false;  // drafting overlaps verification (own Decoder)
  std::string sampling_verifier;       // verification rule at T > 0 ("" for AR)
  std::string drafter_knob;            // knob naming the draft model ("" = none)
  nlohmann::json ToJson() const;
};

// What a factory may use to build a method for one case.
struct MethodContext {
  LoadedTarget* target = nullptr;  // the case's target (model, tokenizer)
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;  // the target's device: drafters run there too
  // Loads (cached across cases) a model by registry name or path, in `dtype` on `device`.
  std::function<LoadedTarget&(const std::string& name_or_path)> load_model;
  // The clock timing-driven decisions read (the SpecBlock bandit's throughput reward); it must
  // outlive the decoder. Null = the steady clock (WallClock); tests inject a cost model
  // (base/clock.h) so their outcome does not depend on the machine's load.
  const Clock* clock = nullptr;
};

using MethodFactory =
    std::function<std::unique_ptr<Decoder>(MethodContext& context, const nlohmann::json& knobs)>;

struct MethodInfo {
  std::string name;
  std::string description;
  std::string paper;  // citation / link ("" for baselines)
  MethodTraits traits;
  std::vector<MethodKnob> knobs;
  MethodFactory factory;
  // Optional up-front check of resolved knobs beyond ranges (e.g. that a named head exists), run
  // by the runner before any case; throws specbed::Error. Without it, a drafter_knob is checked
  // as a model name or path.
  std::function<void(const nlohmann::json& knobs)> validate;
};

class MethodRegistry {
 public:
  // Adds a method; a duplicate name or a missing factory is an error.
  void Register(MethodInfo info);
  std::vector<std::string> Names() const;
  bool Has(const std::string& name) const;
  const MethodInfo& Info(const std::string& name) const;
  // Knobs with defaults filled in; unknown knob names, wrong types, values out of range or not
  // among the choices fail naming the method and the knob.
  nlohmann::json ResolveKnobs(const std::string& name, const nlohmann::json& knobs) const;
  // ResolveKnobs, then every drafter knob set to "auto" replaced by the shipped drafter of its
  // family for registry target `target` (DefaultDrafterName), so the case key holds the name.
  nlohmann::json ResolveKnobsFor(const std::string& name, const nlohmann::json& knobs,
                                 const std::string& target) const;
  // Builds the method's decoder for one case (knobs are resolved first, "auto" drafters for
  // context.target).
  std::unique_ptr<Decoder> Build(const std::string& name, MethodContext& context,
                                 const nlohmann::json& knobs) const;

 private:
  std::vector<MethodInfo> methods_;
};

// Registers every built-in method (`specbed list methods`), in that order.
void RegisterBuiltinMethods(MethodRegistry& registry);

// Per-method registration functions (one per methods/<name>/ folder).
void RegisterArMethod(MethodRegistry& registry);
void RegisterSpsMethod(MethodRegistry& registry);
void RegisterEagle3Method(MethodRegistry& registry);
void RegisterOsdMethods(MethodRegistry& registry);         // sps+osd, eagle3+osd
void RegisterDflashMethods(MethodRegistry& registry);      // dflash, ddtree
void RegisterJetspecMethods(MethodRegistry& registry);     // jetspec
void RegisterBlockpilotMethods(MethodRegistry& registry);  // dflash+blockpilot
void RegisterPearlMethod(MethodRegistry& registry);        // pearl
void RegisterSpecBranchMethod(MethodRegistry& registry);   // specbranch
void RegisterSpecBlockMethods(MethodRegistry& registry);   // specblock, +osd, +bandit
void RegisterLtdMethods(MethodRegistry& registry);         // ltd, eagle3+{ddd,svip,gammatune}
void RegisterNgramMethod(MethodRegistry& registry);        // ngram
void RegisterSuffixMethod(MethodRegistry& registry);       // suffix
void RegisterLookaheadMethod(MethodRegistry& registry);    // lookahead
void RegisterRecyclingMethod(MethodRegistry& registry);    // recycling
void RegisterMedusaMethod(MethodRegistry& registry);       // medusa

}  // namespace specbed
