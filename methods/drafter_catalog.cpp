// Named drafters (see drafter_catalog.h).
#include "methods/drafter_catalog.h"

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "base/paths.h"

namespace specbed {

const std::vector<NamedDrafter>& NamedDrafters() {
  return BuiltinMethodRegistry().Drafters();
}

bool IsNamedDrafter(const std::string& name, const std::string& family) {
  for (const NamedDrafter& d : NamedDrafters()) {
    if (d.name == name && (family.empty() || d.family == family)) return true;
  }
  return false;
}

std::string ResolveDrafterDir(const std::string& name_or_path) {
  for (const NamedDrafter& d : NamedDrafters()) {
    if (d.name == name_or_path) return BuiltinMethodRegistry().DrafterDir(d);
  }
  return name_or_path;
}

std::string ResolveDrafterDir(const std::string& name_or_path, const std::string& family) {
  return IsNamedDrafter(name_or_path, family) ? ResolveDrafterDir(name_or_path) : name_or_path;
}

std::string ResolveDrafterOrDir(const std::string& name_or_path, const std::string& family,
                                const std::string& what) {
  if (IsNamedDrafter(name_or_path, family)) return ResolveDrafterDir(name_or_path);
  if (!PathExists(name_or_path)) {
    std::vector<std::string> names;
    for (const NamedDrafter& d : NamedDrafters()) {
      if (d.family == family) names.push_back(d.name);
    }
    Fail(what, " '", name_or_path, "' is neither a known ", family, " drafter (", Join(names, ", "),
         ") nor an existing directory");
  }
  return name_or_path;
}

std::string CheckpointFormatOf(const std::string& dir) {
  if (!PathExists(dir + "/config.json")) return "";
  const nlohmann::json config = nlohmann::json::parse(ReadFileToString(dir + "/config.json"));
  return config.is_object() ? config.value("format", "") : "";
}

std::string DefaultDrafterName(const std::string& family, const std::string& target,
                               const std::string& context) {
  if (const NamedDrafter* d = BuiltinMethodRegistry().DefaultDrafter(family, target)) {
    return d->name;
  }
  Fail(context, ": no shipped ", family, " drafter for target '", target,
       "' (shipped: stories260K and stories260K-twin); name one with the knob instead of '",
       kAutoDrafter, "'");
}

}  // namespace specbed
