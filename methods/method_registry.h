// Registry of decoding methods: name -> description, traits, knobs (with defaults and ranges) and
// a factory that assembles the method's Decoder (harness/engine/method.h) for one case.
// Registration is explicit (RegisterBuiltinMethods, called by the runner and the CLI, walks the
// folder list in methods/builtin_methods.h) — no static-initialization magic. A method also
// declares here what it ships: its named drafters (shipped heads and their cost twins), padding
// rules for its drafter's own tensors, and twin writers for learned parts outside the HF layout.
// Unknown names fail with the list of known ones and the nearest match; unknown knobs, wrong types
// and out-of-range values fail naming the method and knob. The runner branches on traits, never on
// method names. Checked by: tests/engine/speculative_test.cpp (MethodRegistry.*),
// tests/cli/cli_test.cpp
// (`specbed list methods`).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "harness/engine/method.h"
#include "methods/builtin_methods.h"
#include "models/model_registry.h"
#include "models/twin/stories_twin.h"

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
  // Drafter knobs: the drafter family (methods/drafter_catalog.h: "draft", "eagle3", "dflash",
  // "jetspec", "blockpilot", ...); the value "auto" resolves to the target's shipped drafter of
  // this family (ResolveKnobsFor). "" = not a drafter knob.
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

// Objects the decoders built from one MethodContext share, by key: the batch engine builds one
// decoder per slot, and a drafter's weights are read once for all of them (which also lets a
// batched draft call see that the slots' drafters hold the same head: Drafter::DraftBatchKey).
// Factories run on one thread; not thread-safe.
class SharedParts {
 public:
  // The part stored under (T, key), built by `build` on first use.
  template <class T>
  std::shared_ptr<T> GetOrBuild(const std::string& key,
                                const std::function<std::shared_ptr<T>()>& build) {
    const std::string full = std::string(typeid(T).name()) + " " + key;
    auto it = parts_.find(full);
    if (it == parts_.end()) {
      it = parts_.emplace(full, std::const_pointer_cast<std::remove_const_t<T>>(build())).first;
    }
    return std::static_pointer_cast<T>(it->second);
  }

 private:
  std::map<std::string, std::shared_ptr<void>> parts_;
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
  // Parts shared by every decoder built from this context (and its copies): heads loaded once.
  std::shared_ptr<SharedParts> shared = std::make_shared<SharedParts>();
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

// A drafter SpecBed ships or builds, by name; declared by the method that reads it
// (methods/drafter_catalog.h resolves the names).
struct NamedDrafter {
  std::string name;         // e.g. "stories260K-twin-eagle3"
  std::string family;       // MethodKnob::drafter_family
  std::string target;       // the registry target it belongs to
  std::string description;  // one line
  std::string shipped;      // its folder under SpecBed's home ("models/stories260K/eagle3"), or
  std::optional<TwinDrafterSpec> twin;  // the cost twin of a shipped folder, built on first use
};

// Writes the cost twin of a small learned part outside the HF layout (H-RAD, LTD's classifiers)
// at width factor `width_factor` of what it reads, when `source` is one; returns whether it was.
using TwinWriter =
    std::function<bool(const std::string& source, const std::string& output, int64_t width_factor)>;

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

  // What the methods ship. A drafter whose (name, target) is declared already is an error.
  void AddDrafter(NamedDrafter drafter);
  // The stories260K drafter of `family` shipped in models/stories260K/<twin.folder> ("<family>"
  // when empty) as "stories260K-<family>", and its cost twin "stories260K-twin-<family>" for
  // stories260K-twin, padded as `twin` says.
  void AddShippedDrafter(const std::string& family, const std::string& description,
                         TwinDrafterSpec twin = {});
  // Padding rules for the tensors of a method's own drafter (models/twin/cost_twin.h).
  void AddTwinPadRules(const std::vector<TwinPadRule>& rules);
  void AddTwinWriter(TwinWriter writer);
  const std::vector<NamedDrafter>& Drafters() const { return drafters_; }
  const std::vector<TwinPadRule>& TwinPadRules() const { return twin_pad_rules_; }
  const std::vector<TwinWriter>& TwinWriters() const { return twin_writers_; }
  // The checkpoint directory of a declared drafter (building its cost twin on first use).
  std::string DrafterDir(const NamedDrafter& drafter) const;
  // The declared drafter of `family` for registry target `target`, or null.
  const NamedDrafter* DefaultDrafter(const std::string& family, const std::string& target) const;

 private:
  std::vector<MethodInfo> methods_;
  std::vector<NamedDrafter> drafters_;
  std::vector<TwinPadRule> twin_pad_rules_;
  std::vector<TwinWriter> twin_writers_;
};

// Registers every built-in method (`specbed list methods`), in that order: the
// Register<Folder>Methods of every folder in SPECBED_METHOD_FOLDERS (methods/builtin_methods.h).
void RegisterBuiltinMethods(MethodRegistry& registry);

// The built-in registry, built once per process (RegisterBuiltinMethods); the drafter catalogue
// (methods/drafter_catalog.h) reads its drafters.
const MethodRegistry& BuiltinMethodRegistry();

#define SPECBED_DECLARE_REGISTER(Folder) void Register##Folder##Methods(MethodRegistry& registry);
SPECBED_METHOD_FOLDERS(SPECBED_DECLARE_REGISTER)
#undef SPECBED_DECLARE_REGISTER

}  // namespace specbed
