// What a method folder must provide, and that nothing outside it needs to name it: the contract
// behind "adding a method touches its folder, methods/builtin_methods.h and
// methods/CMakeLists.txt". For every folder of SPECBED_METHOD_FOLDERS: a README, a registration
// that adds at least one method, a shipped drafter (or a drafter knob that takes a path) for every
// drafter family its methods name, on both shipped targets; for every folder of
// SPECBED_TRAINER_FOLDERS: its `specbed train` subcommands with -o/--output and a description. And
// no product file outside methods/<folder>/ includes the folder's headers (apart from the few
// top-level commands listed below, which exist for one method); a planted include shows the scan
// catches one.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "methods/builtin_methods.h"
#include "methods/common/train/train_flags.h"
#include "methods/drafter_catalog.h"
#include "methods/method_registry.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Every folder of the list with its registration function, in list order.
struct FolderEntry {
  std::string folder;
  void (*register_methods)(MethodRegistry&);
};

std::vector<FolderEntry> MethodFolders() {
  std::vector<FolderEntry> folders;
#define SPECBED_ENTRY(Folder) folders.push_back({Lower(#Folder), &Register##Folder##Methods});
  SPECBED_METHOD_FOLDERS(SPECBED_ENTRY)
#undef SPECBED_ENTRY
  return folders;
}

struct TrainerEntry {
  std::string folder;
  void (*add_commands)(CLI::App*);
};

std::vector<TrainerEntry> TrainerFolders() {
  std::vector<TrainerEntry> folders;
#define SPECBED_ENTRY(Folder) folders.push_back({Lower(#Folder), &cli::Add##Folder##TrainCommands});
  SPECBED_TRAINER_FOLDERS(SPECBED_ENTRY)
#undef SPECBED_ENTRY
  return folders;
}

const std::string kSource = SPECBED_SOURCE_DIR;

TEST(MethodContract, EveryFolderHasAReadmeAndRegistersAtLeastOneMethod) {
  MethodRegistry registry;
  for (const FolderEntry& f : MethodFolders()) {
    SCOPED_TRACE(f.folder);
    EXPECT_TRUE(fs::exists(kSource + "/methods/" + f.folder + "/README.md"));
    const size_t before = registry.Names().size();
    f.register_methods(registry);  // in list order: later folders may derive from earlier ones
    EXPECT_GT(registry.Names().size(), before) << "registers no method";
  }
  EXPECT_EQ(registry.Names(), BuiltinMethodRegistry().Names());
}

// Every drafter family a method's knobs name resolves "auto" on both shipped targets, to a
// declared drafter whose folder ships with SpecBed (or, for a twin, whose source folder and
// weights do).
TEST(MethodContract, EveryDrafterFamilyShipsForBothTargets) {
  const MethodRegistry& registry = BuiltinMethodRegistry();
  std::set<std::string> families;
  for (const std::string& name : registry.Names()) {
    for (const MethodKnob& k : registry.Info(name).knobs) {
      if (!k.drafter_family.empty()) families.insert(k.drafter_family);
    }
  }
  EXPECT_GE(families.size(), 8u);
  for (const std::string& family : families) {
    for (const char* target : {"stories260K", "stories260K-twin"}) {
      SCOPED_TRACE(family + " on " + target);
      const NamedDrafter* d = registry.DefaultDrafter(family, target);
      ASSERT_NE(d, nullptr) << "no drafter of this family declared for the target";
      const std::string folder = d->twin ? "models/stories260K/" + d->twin->folder : d->shipped;
      EXPECT_TRUE(fs::is_directory(kSource + "/" + folder) && !fs::is_empty(kSource + "/" + folder))
          << folder;
      if (d->twin) {
        EXPECT_TRUE(fs::exists(kSource + "/" + folder + "/" + d->twin->tensor_file)) << folder;
      }
    }
  }
}

TEST(MethodContract, EveryTrainerFolderAddsTrainSubcommandsWithAnOutput) {
  std::set<std::string> names;
  for (const TrainerEntry& f : TrainerFolders()) {
    SCOPED_TRACE(f.folder);
    EXPECT_TRUE(fs::exists(kSource + "/methods/" + f.folder + "/README.md"));
    CLI::App train("train");
    f.add_commands(&train);
    const std::vector<CLI::App*> commands = train.get_subcommands({});
    ASSERT_FALSE(commands.empty()) << "adds no `specbed train` subcommand";
    for (const CLI::App* cmd : commands) {
      EXPECT_TRUE(names.insert(cmd->get_name()).second) << cmd->get_name() << " twice";
      EXPECT_FALSE(cmd->get_description().empty()) << cmd->get_name();
      EXPECT_NO_THROW(cmd->get_option("--output")) << cmd->get_name() << " has no -o/--output";
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"draft-lm", "eagle3", "medusa", "specblock", "dflash",
                                          "jetspec", "hrad", "ltd", "ltd-baselines"}));
}

// The method folders `path` (relative to the source root) includes headers of, for a file outside
// methods/<folder>/; `text` is its content.
std::set<std::string> MethodFoldersIncluded(const std::string& path, const std::string& text) {
  static const std::regex include(R"re(#include\s+"methods/([a-z0-9_]+)/)re");
  std::set<std::string> folders;
  for (std::sregex_iterator it(text.begin(), text.end(), include), end; it != end; ++it) {
    const std::string folder = (*it)[1];
    if (folder != "common" && path.rfind("methods/" + folder + "/", 0) != 0) {
      folders.insert(folder);
    }
  }
  return folders;
}

// The product files outside the method folders (every top-level source folder but methods/, and
// methods/ files not in a method folder).
std::map<std::string, std::string> ProductFilesOutsideMethodFolders() {
  std::map<std::string, std::string> files;
  std::set<std::string> method_folders;
  for (const FolderEntry& f : MethodFolders()) method_folders.insert(f.folder);
  for (const char* top : {"base", "kernels", "models", "datasets", "harness", "methods", "results",
                          "metrics", "reports"}) {
    for (const auto& e : fs::recursive_directory_iterator(kSource + "/" + std::string(top))) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu")) continue;
      const std::string rel = fs::relative(e.path(), kSource).string();
      const std::string second = rel.substr(rel.find('/') + 1);
      if (std::string(top) == "methods" &&
          method_folders.count(second.substr(0, second.find('/'))) != 0) {
        continue;
      }
      std::ifstream in(e.path());
      std::stringstream text;
      text << in.rdbuf();
      files[rel] = text.str();
    }
  }
  return files;
}

// Top-level commands that exist for one method (or two): `specbed blockpilot` (labels, oracle,
// predictor training), `specbed ltd-adaptation` (LTD's probe), `bench --lookup-contexts` (the
// lookup drafters' step cost).
const std::map<std::string, std::set<std::string>> kOneMethodCommands = {
    {"harness/cli/cmd_blockpilot.cpp", {"blockpilot"}},
    {"harness/cli/cmd_ltd.cpp", {"ltd"}},
    {"harness/cli/bench_lookup.cpp", {"ngram", "suffix"}},
};

TEST(MethodContract, NoProductFileOutsideAMethodFolderIncludesIt) {
  const auto files = ProductFilesOutsideMethodFolders();
  EXPECT_GT(files.size(), 100u);
  EXPECT_EQ(files.count("methods/method_registry.cpp"), 1u);
  EXPECT_EQ(files.count("methods/eagle3/eagle3_method.cpp"), 0u);
  for (const auto& [path, text] : files) {
    const auto allowed = kOneMethodCommands.find(path);
    for (const std::string& folder : MethodFoldersIncluded(path, text)) {
      EXPECT_TRUE(allowed != kOneMethodCommands.end() && allowed->second.count(folder) != 0)
          << path << " includes a header of methods/" << folder << "/";
    }
  }
}

// Negative control: the scan finds a planted include, and ignores common/ and a folder's own.
TEST(MethodContract, TheIncludeScanFindsAPlantedInclude) {
  EXPECT_EQ(MethodFoldersIncluded("models/twin/stories_twin.cpp",
                                  "#include \"methods/eagle3/eagle3_head.h\"\n"),
            std::set<std::string>{"eagle3"});
  EXPECT_EQ(MethodFoldersIncluded("harness/cli/cmd_train.cpp",
                                  "#include  \"methods/specblock/specblock_trainer.h\""),
            std::set<std::string>{"specblock"});
  EXPECT_TRUE(MethodFoldersIncluded("methods/eagle3/eagle3_method.cpp",
                                    "#include \"methods/eagle3/eagle3_head.h\"\n"
                                    "#include \"methods/common/draft_tree.h\"\n")
                  .empty());
}

}  // namespace
}  // namespace specbed
