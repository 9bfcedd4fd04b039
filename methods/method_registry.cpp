// Method registry (see method_registry.h).
#include "methods/method_registry.h"

#include <cmath>

#include "base/error.h"
#include "base/names.h"
#include "base/paths.h"
#include "methods/drafter_catalog.h"

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
      const NamedDrafter* d = DefaultDrafter(k.drafter_family, target);
      resolved[k.name] = d != nullptr
                             ? d->name
                             : DefaultDrafterName(k.drafter_family, target,
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

void MethodRegistry::AddDrafter(NamedDrafter drafter) {
  for (const NamedDrafter& d : drafters_) {
    SPECBED_CHECK(d.name != drafter.name || d.target != drafter.target, "drafter '", drafter.name,
                  "' declared twice for target '", drafter.target, "'");
  }
  SPECBED_CHECK(drafter.shipped.empty() != !drafter.twin.has_value(), "drafter '", drafter.name,
                "' must be either a shipped folder or a cost twin");
  drafters_.push_back(std::move(drafter));
}

void MethodRegistry::AddShippedDrafter(const std::string& family, const std::string& description,
                                       TwinDrafterSpec twin) {
  if (twin.folder.empty()) twin.folder = family;
  const std::string name = "stories260K-" + family;
  AddDrafter({name, family, "stories260K", description, "models/stories260K/" + twin.folder, {}});
  const std::string shape = twin.width_factor == kStoriesTwinWidthFactor
                                ? "width x" + std::to_string(twin.width_factor) + ", the target's"
                                : "width x" + std::to_string(twin.width_factor);
  AddDrafter({"stories260K-twin-" + family, family, "stories260K-twin",
              "cost twin of " + name + " (" + shape + ")", "", twin});
}

void MethodRegistry::AddTwinPadRules(const std::vector<TwinPadRule>& rules) {
  twin_pad_rules_.insert(twin_pad_rules_.end(), rules.begin(), rules.end());
}

void MethodRegistry::AddTwinWriter(TwinWriter writer) {
  twin_writers_.push_back(std::move(writer));
}

std::string MethodRegistry::DrafterDir(const NamedDrafter& drafter) const {
  return drafter.twin ? StoriesTwinDrafter(*drafter.twin, twin_pad_rules_)
                      : HomePath(drafter.shipped);
}

const NamedDrafter* MethodRegistry::DefaultDrafter(const std::string& family,
                                                   const std::string& target) const {
  for (const NamedDrafter& d : drafters_) {
    if (d.family == family && d.target == target) return &d;
  }
  return nullptr;
}

void RegisterBuiltinMethods(MethodRegistry& registry) {
#define SPECBED_REGISTER(Folder) Register##Folder##Methods(registry);
  SPECBED_METHOD_FOLDERS(SPECBED_REGISTER)
#undef SPECBED_REGISTER
}

const MethodRegistry& BuiltinMethodRegistry() {
  static const MethodRegistry registry = [] {
    MethodRegistry r;
    RegisterBuiltinMethods(r);
    return r;
  }();
  return registry;
}

}  // namespace specbed
