// Named drafters (see drafter_catalog.h).
#include "models/drafter_catalog.h"

#include "base/error.h"
#include "base/paths.h"
#include "models/twin/stories_twin.h"

namespace specbed {

namespace {

template <const char* kFolder>
std::string Shipped() {
  return HomePath(std::string("models/stories260K/") + kFolder);
}
constexpr char kDraft[] = "draft", kEagle3[] = "eagle3", kDflash[] = "dflash",
               kJetspec[] = "jetspec", kBlockpilot[] = "blockpilot", kHrad[] = "hrad",
               kHradTwin[] = "hrad-twin", kSpecblock[] = "specblock", kLtdTwin[] = "ltd-twin",
               kLtdBaselines[] = "ltd-baselines", kLtdBaselinesTwin[] = "ltd-baselines-twin",
               kMedusa[] = "medusa";

}  // namespace

const std::vector<NamedDrafter>& NamedDrafters() {
  static const std::vector<NamedDrafter> drafters = {
      {"stories260K-draft", "draft", "stories260K",
       "SpS draft LM distilled from stories260K (2 layers, width 48)", &Shipped<kDraft>},
      {"stories260K-eagle3", "eagle3", "stories260K", "EAGLE-3 head trained on stories260K",
       &Shipped<kEagle3>},
      {"stories260K-dflash", "dflash", "stories260K", "DFlash block head trained on stories260K",
       &Shipped<kDflash>},
      {"stories260K-jetspec", "jetspec", "stories260K",
       "JetSpec causal block head trained on stories260K", &Shipped<kJetspec>},
      {"stories260K-blockpilot", "blockpilot", "stories260K",
       "BlockPilot block-size predictor for stories260K-dflash", &Shipped<kBlockpilot>},
      {"stories260K-specblock", "specblock", "stories260K",
       "SpecBlock block drafter trained on stories260K", &Shipped<kSpecblock>},
      {"stories260K-medusa", "medusa", "stories260K", "Medusa-1 heads (4) trained on stories260K",
       &Shipped<kMedusa>},
      {"stories260K-twin-draft", "draft", "stories260K-twin",
       "cost twin of stories260K-draft (width x4: 192)", [] { return StoriesTwin().draft; }},
      {"stories260K-twin-eagle3", "eagle3", "stories260K-twin",
       "cost twin of stories260K-eagle3 (width x8: 512)", [] { return StoriesTwin().eagle3; }},
      {"stories260K-twin-dflash", "dflash", "stories260K-twin",
       "cost twin of stories260K-dflash (width x8: 512)", [] { return StoriesTwin().dflash; }},
      {"stories260K-twin-jetspec", "jetspec", "stories260K-twin",
       "cost twin of stories260K-jetspec (width x8: 512)", [] { return StoriesTwin().jetspec; }},
      {"stories260K-twin-specblock", "specblock", "stories260K-twin",
       "cost twin of stories260K-specblock (width x8: 512)",
       [] { return StoriesTwin().specblock; }},
      {"stories260K-twin-medusa", "medusa", "stories260K-twin",
       "cost twin of stories260K-medusa (width x8: 512)", [] { return StoriesTwin().medusa; }},
      {"stories260K-blockpilot", "blockpilot", "stories260K-twin",
       "BlockPilot predictor of stories260K (the twin's logits are stories260K's)",
       &Shipped<kBlockpilot>},
      {"stories260K-hrad", "hrad", "stories260K",
       "SpecBranch H-RAD predictor for stories260K + stories260K-draft", &Shipped<kHrad>},
      {"stories260K-twin-hrad", "hrad", "stories260K-twin",
       "SpecBranch H-RAD predictor for stories260K-twin + stories260K-twin-draft",
       &Shipped<kHradTwin>},
      {"stories260K-twin-ltd", "ltd", "stories260K-twin",
       "LTD depth + size policies for stories260K-twin + stories260K-twin-eagle3",
       &Shipped<kLtdTwin>},
      {"stories260K-twin-ltd", "ltd", "stories260K",
       "the twin's LTD policies (trained on the twin's costs; stories260K's observations are the "
       "twin's, so they run there too, untuned for its costs)",
       &Shipped<kLtdTwin>},
      {"stories260K-ltd-baselines", "ltd-baselines", "stories260K",
       "Disco, SpecDec++ and C2T classifiers for stories260K + stories260K-eagle3",
       &Shipped<kLtdBaselines>},
      {"stories260K-twin-ltd-baselines", "ltd-baselines", "stories260K-twin",
       "Disco, SpecDec++ and C2T classifiers for stories260K-twin + stories260K-twin-eagle3",
       &Shipped<kLtdBaselinesTwin>},
  };
  return drafters;
}

bool IsNamedDrafter(const std::string& name, const std::string& family) {
  for (const NamedDrafter& d : NamedDrafters()) {
    if (d.name == name && (family.empty() || d.family == family)) return true;
  }
  return false;
}

std::string ResolveDrafterDir(const std::string& name_or_path) {
  for (const NamedDrafter& d : NamedDrafters()) {
    if (d.name == name_or_path) return d.dir();
  }
  return name_or_path;
}

std::string DefaultDrafterName(const std::string& family, const std::string& target,
                               const std::string& context) {
  for (const NamedDrafter& d : NamedDrafters()) {
    if (d.family == family && d.target == target) return d.name;
  }
  Fail(context, ": no shipped ", family, " drafter for target '", target,
       "' (shipped: stories260K and stories260K-twin); name one with the knob instead of '",
       kAutoDrafter, "'");
}

}  // namespace specbed
