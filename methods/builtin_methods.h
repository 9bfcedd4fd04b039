// The built-in method folders: the one list a new method is added to (plus its sources in
// methods/CMakeLists.txt). Each folder in SPECBED_METHOD_FOLDERS defines
//   void Register<Folder>Methods(MethodRegistry& registry);
// which registers its methods (name, traits, knobs, factory) and declares what it ships
// (MethodRegistry::AddShippedDrafter / AddDrafter, AddTwinPadRules, AddTwinWriter). Each folder
// in SPECBED_TRAINER_FOLDERS also defines, in the trainers' library (specbed_trainers),
//   void Add<Folder>TrainCommands(CLI::App* train);
// which adds its `specbed train <name>` subcommands. Nothing outside the folder names it:
// tests/methods/method_contract_test.cpp lists what a folder must provide and checks that no
// other product file includes its headers.
// Order: registration (and `specbed list methods`) order; dflash comes after sps and eagle3
// (its entries derive from theirs). Trainer order: `specbed train --help` order.
#pragma once

// One folder a line (a new method adds one).
// clang-format off
#define SPECBED_METHOD_FOLDERS(X) \
  X(Ar) \
  X(Sps) \
  X(Eagle3) \
  X(Osd) \
  X(Dflash) \
  X(Jetspec) \
  X(Blockpilot) \
  X(Pearl) \
  X(SpecBranch) \
  X(SpecBlock) \
  X(Ltd) \
  X(Ngram) \
  X(Suffix) \
  X(Lookahead) \
  X(Recycling) \
  X(Medusa)

#define SPECBED_TRAINER_FOLDERS(X) \
  X(Sps) \
  X(Eagle3) \
  X(Medusa) \
  X(SpecBlock) \
  X(Dflash) \
  X(SpecBranch) \
  X(Ltd)
// clang-format on
