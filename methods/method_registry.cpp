// Method registry (see method_registry.h).
#include "methods/method_registry.h"

#include "harness/base/error.h"
#include "harness/base/names.h"

namespace specbed {

void MethodRegistry::Register(MethodInfo info) {
  SPECBED_CHECK(!Has(info.name), "method '", info.name, "' registered twice");
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
      const bool same_kind =
          (def.is_number() && it.value().is_number()) || def.type() == it.value().type();
      SPECBED_CHECK(same_kind, "knob '", it.key(), "' of method '", name, "' expects a value like ",
                    def.dump(), ", got ", it.value().dump());
      resolved[it.key()] = it.value();
    }
  }
  return resolved;
}

void RegisterBuiltinMethods(MethodRegistry& registry) {
  MethodInfo ar;
  ar.name = "ar";
  ar.description = "autoregressive decoding with the target alone (the baseline of every speedup)";
  ar.traits.lossless = true;
  registry.Register(ar);
}

}  // namespace specbed
