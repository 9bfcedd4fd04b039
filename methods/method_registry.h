// Registry of decoding methods: name -> description, traits, knobs (with defaults). Registration
// is explicit (RegisterBuiltinMethods, called by the CLI) — no static-initialization magic.
// Unknown names fail with the list of known ones and the nearest match.
// Issue 3 (speculative core) extends MethodInfo with the Drafter/Controller/Adapter factories.
// Checked by: tests/engine/runner_test.cpp (unknown method), `specbed list methods`.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specbed {

struct MethodKnob {
  std::string name;
  nlohmann::json default_value;
  std::string description;
};

struct MethodTraits {
  bool lossless = true;        // output distribution equals the target's (exact at T=0)
  bool tree = false;           // drafts trees (vs. chains)
  bool needs_drafter = false;  // needs a draft model / head
  bool supports_batch = true;  // batch > 1
};

struct MethodInfo {
  std::string name;
  std::string description;
  MethodTraits traits;
  std::vector<MethodKnob> knobs;
};

class MethodRegistry {
 public:
  // Adds a method; a duplicate name is an error.
  void Register(MethodInfo info);
  std::vector<std::string> Names() const;
  bool Has(const std::string& name) const;
  const MethodInfo& Info(const std::string& name) const;
  // Knobs with defaults filled in; unknown knob names or wrong types fail naming the method.
  nlohmann::json ResolveKnobs(const std::string& name, const nlohmann::json& knobs) const;

 private:
  std::vector<MethodInfo> methods_;
};

// Registers every built-in method (today: ar).
void RegisterBuiltinMethods(MethodRegistry& registry);

}  // namespace specbed
