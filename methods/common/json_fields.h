// Writing a struct's members into a JSON object under their own names, for the recipes,
// settings and config.json files that record a config struct field by field:
//   SPECBED_JSON_PUT(j, c, top_k, max_depth);  // j["top_k"] = c.top_k; j["max_depth"] = ...;
// Keys go in the order given (ordered_json keeps it). Built on nlohmann's NLOHMANN_JSON_PASTE,
// the field iteration behind NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE (at most 63 members a call).
// Checked by: tests/methods/ltd_test.cpp, tests/methods/ltd_ppo_test.cpp,
// tests/train/train_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

// Assigns j["m"] = object.m for each member name m, in order.
#define SPECBED_JSON_PUT(j, object, ...)                                     \
  do {                                                                       \
    auto& nlohmann_json_j = (j);                                             \
    const auto& nlohmann_json_t = (object);                                  \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, __VA_ARGS__)) \
  } while (false)
