// `specbed list [models|methods|datasets|templates]`: what SpecBed knows (drafter knobs name what
// "auto" picks per target). Checked by: tests/cli/cli_test.cpp (CliList.*).
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"
#include "base/names.h"
#include "datasets/dataset.h"
#include "harness/cli/commands.h"
#include "methods/drafter_catalog.h"
#include "methods/method_registry.h"
#include "models/model_registry.h"
#include "models/tokenizer/chat_template.h"

namespace specbed::cli {
namespace {

// A knob bound as written in a config: integers in full ("1048576", not "1.04858e+06"), other
// values in shortest round-trip form ("0.05").
std::string KnobBound(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    for (int precision = 1; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
  }
  return buf;
}

void ListModels() {
  std::printf("models (or pass a Hugging Face checkpoint directory / llama2.c .bin path):\n");
  for (const auto& name : BuiltinModelNames()) {
    const ModelSpec s = ResolveModel(name);
    std::printf("  %-18s %-8s template=%-7s %s\n", s.name.c_str(), s.format.c_str(),
                s.chat_template.c_str(), s.description.c_str());
  }
}

// "auto = stories260K: stories260K-draft, stories260K-twin: stories260K-twin-draft": what "auto"
// picks for each registry target that ships a drafter of `family`.
std::string DefaultDraftersLine(const std::string& family) {
  std::vector<std::string> pairs;
  for (const std::string& target : BuiltinModelNames()) {
    try {
      pairs.push_back(target + ": " + DefaultDrafterName(family, target, "list"));
    } catch (const Error&) {
      // No shipped drafter of this family for this target.
    }
  }
  return "auto = " +
         (pairs.empty() ? std::string("(no target ships one; name one)") : Join(pairs, ", "));
}

void ListMethods() {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  std::printf("methods:  (knobs: name = default [range or choices])\n");
  for (const auto& name : registry.Names()) {
    const MethodInfo& m = registry.Info(name);
    const MethodTraits& t = m.traits;
    std::printf("  %-12s %s\n", m.name.c_str(), m.description.c_str());
    if (!m.paper.empty()) std::printf("      paper: %s\n", m.paper.c_str());
    std::string traits = std::string("lossless=") + (t.lossless ? "yes" : "no") +
                         " speculative=" + (t.speculative ? "yes" : "no") +
                         " tree=" + (t.tree ? "yes" : "no") +
                         " drafter=" + (t.needs_drafter ? "yes" : "no") +
                         " draft_probs=" + (t.needs_draft_probs ? "yes" : "no") +
                         " target_hidden=" + (t.needs_target_hidden ? "yes" : "no") +
                         " online=" + (t.trains_online ? "yes" : "no") +
                         " batch>1=" + (t.supports_batch ? "yes" : "no");
    if (!t.sampling_verifier.empty()) traits += " verify(T>0)=" + t.sampling_verifier;
    std::printf("      traits: %s\n", traits.c_str());
    for (const auto& k : m.knobs) {
      std::string range;
      if (k.min <= k.max) {
        range = " [" + KnobBound(k.min) + ", " + KnobBound(k.max) + "]";
      } else if (!k.choices.empty()) {
        range = " {" + Join(k.choices, ", ") + "}";
      }
      std::printf("      %s = %s%s  %s\n", k.name.c_str(), k.default_value.dump().c_str(),
                  range.c_str(), k.description.c_str());
      if (!k.drafter_family.empty()) {
        std::printf("          %s\n", DefaultDraftersLine(k.drafter_family).c_str());
      }
    }
  }
}

void ListDatasets() {
  const DatasetRegistry& registry = DatasetRegistry::Builtin();
  std::printf("datasets (or pass a .jsonl prompt file):\n");
  for (const auto& name : registry.Names()) {
    const DatasetInfo& d = registry.Info(name);
    std::printf("  %-16s %5lld prompts  %d turn(s)  categories: %s\n", d.name.c_str(),
                static_cast<long long>(d.prompt_count), d.multi_turn ? 2 : 1,
                d.categories.empty() ? "-" : Join(d.categories, ",").c_str());
  }
}

void ListTemplates() {
  std::printf("chat templates: %s\n", Join(ChatTemplateNames(), ", ").c_str());
}

}  // namespace

void AddListCommand(CLI::App& app) {
  auto what = std::make_shared<std::string>("all");
  CLI::App* cmd =
      app.add_subcommand("list", "List known models, methods, datasets, chat templates");
  cmd->add_option("what", *what, "models | methods | datasets | templates | all")
      ->check(CLI::IsMember({"models", "methods", "datasets", "templates", "all"}))
      ->capture_default_str();
  cmd->callback([what] {
    const bool all = *what == "all";
    if (all || *what == "models") ListModels();
    if (all || *what == "methods") ListMethods();
    if (all || *what == "datasets") ListDatasets();
    if (all || *what == "templates") ListTemplates();
  });
}

}  // namespace specbed::cli
