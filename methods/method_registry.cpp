// Method registry (see method_registry.h).
#include "methods/method_registry.h"

#include <cmath>

#include "base/error.h"
#include "base/names.h"
#include "models/drafter_catalog.h"

namespace specbed {

nlohmann::json MethodTraits::ToJson() const {
  return nlohmann::json{{"speculative", speculative},
                        {"lossless", lossless},
                        {"tree", tree},
                        {"needs_drafter", needs_drafter},
                        {"needs_draft_probs", needs_draft_probs},
                        {"needs_target_hidden", needs_target_hidden},
                        {"supports_batch", supports_batch},
                        {"trains_online", trains_online},
                        {"overlaps_verification", overlaps_verification},
                        {"sampling_verifier", sampling_verifier},
                        {"drafter_knob", drafter_knob}};
}

void MethodRegistry::Register(MethodInfo info) {
  SPECBED_CHECK(!Has(info.name), "method '", info.name, "' registered twice");
  SPECBED_CHECK(static_cast<bool>(info.factory), "method '", info.name, "' has no factory");
  methods_.push_back(std::move(info));
}

std::vector<std::string> MethodRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& m : methods_) names.push_back(m.name);
  return names;
}

bool MethodRegistry::Has(const std::string& name) const {
  for (const auto& m : methods_) {
    if (m.name == name) return true;
  }
  return false;
}

const MethodInfo& MethodRegistry::Info(const std::string& name) const {
  for (const auto& m : methods_) {
    if (m.name == name) return m;
  }
  FailUnknownName("method", name, Names());
}

nlohmann::json MethodRegistry::ResolveKnobs(const std::string& name,
                                            const nlohmann::json& knobs) const {
  const MethodInfo& info = Info(name);
  SPECBED_CHECK(knobs.is_null() || knobs.is_object(), "knobs of method '", name,
                "' must be a JSON object, got ", knobs.dump());
  nlohmann::json resolved = nlohmann::json::object();
  std::vector<std::string> known;
  for (const auto& k : info.knobs) {
    resolved[k.name] = k.default_value;
    known.push_back(k.name);
  }
  if (knobs.is_object()) {
    for (auto it = knobs.begin(); it != knobs.end(); ++it) {
      if (!resolved.contains(it.key()))
        FailUnknownName("knob", it.key(), known, "method '" + name + "'");
      const nlohmann::json& def = resolved[it.key()];
      const bool integral_ok = !def.is_number_integer() || it.value().is_number_integer();
      const bool same_kind =
          ((def.is_number() && it.value().is_number()) || def.type() == it.value().type()) &&
          integral_ok;
      SPECBED_CHECK(same_kind, "knob '", it.key(), "' of method '", name, "' expects a value like ",
                    def.dump(), ", got ", it.value().dump());
      resolved[it.key()] = it.value();
    }
  }
  for (const auto& k : info.knobs) {
    const nlohmann::json& v = resolved[k.name];
    if (v.is_number() && k.min <= k.max) {
      const double x = v.get<double>();
      SPECBED_CHECK(x >= k.min && x <= k.max, "knob '", k.name, "' of method '", name,
                    "' must be in [", k.min, ", ", k.max, "], got ", v.dump());
    }
    if (v.is_string() && !k.choices.empty()) {
      const std::string s = v.get<std::string>();
      bool ok = false;
      for (const auto& c : k.choices) ok = ok || c == s;
      if (!ok)
        FailUnknownName("value of knob '" + k.name + "'", s, k.choices, "method '" + name + "'");
    }
  }
  return resolved;
}

nlohmann::json MethodRegistry::ResolveKnobsFor(const std::string& name, const nlohmann::json& knobs,
                                               const std::string& target) const {
  nlohmann::json resolved = ResolveKnobs(name, knobs);
  for (const MethodKnob& k : Info(name).knobs) {
    if (k.drafter_family.empty()) continue;
    const nlohmann::json& v = resolved[k.name];
    if (v.is_string() && v.get<std::string>() == kAutoDrafter) {
      resolved[k.name] = DefaultDrafterName(k.drafter_family, target,
                                            "method '" + name + "', knob '" + k.name + "'");
    }
  }
  return resolved;
}

std::unique_ptr<Decoder> MethodRegistry::Build(const std::string& name, MethodContext& context,
                                               const nlohmann::json& knobs) const {
  const MethodInfo& info = Info(name);
  SPECBED_CHECK(context.target != nullptr && context.target->model != nullptr, "method '", name,
                "': no target model");
  return info.factory(context, ResolveKnobsFor(name, knobs, context.target->spec.name));
}

void RegisterBuiltinMethods(MethodRegistry& registry) {
  RegisterArMethod(registry);
  RegisterSpsMethod(registry);
  RegisterEagle3Method(registry);
  RegisterOsdMethods(registry);
  RegisterDflashMethods(registry);  // after sps and eagle3: derives from their entries
  RegisterJetspecMethods(registry);
  RegisterBlockpilotMethods(registry);
  RegisterPearlMethod(registry);
  RegisterSpecBranchMethod(registry);
  RegisterSpecBlockMethods(registry);  // specblock, specblock+osd, specblock+bandit
  RegisterLtdMethods(registry);        // ltd, eagle3+{ddd,svip,gammatune,disco,specdecpp,c2t}
  RegisterNgramMethod(registry);
  RegisterSuffixMethod(registry);
  RegisterLookaheadMethod(registry);
  RegisterRecyclingMethod(registry);
  RegisterMedusaMethod(registry);
}

}  // namespace specbed
