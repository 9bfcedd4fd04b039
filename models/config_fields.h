// Typed readers for fields of a JSON config object (Hugging Face config.json and the drafter-head
// configs): each error names the source file, the field and what was expected.
// Checked by: tests/models/config_test.cpp, tests/methods/eagle3_head_test.cpp,
// tests/methods/dflash_head_test.cpp (their malformed-config cases).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specbed::config_fields {

// Present and not null.
bool Has(const nlohmann::json& j, const char* field);
// Required (first overloads) or with a fallback when absent / null.
int64_t GetInt(const nlohmann::json& j, const char* field, const std::string& source);
int64_t GetInt(const nlohmann::json& j, const char* field, const std::string& source,
               int64_t fallback);
double GetDouble(const nlohmann::json& j, const char* field, const std::string& source);
double GetDouble(const nlohmann::json& j, const char* field, const std::string& source,
                 double fallback);
bool GetBool(const nlohmann::json& j, const char* field, const std::string& source, bool fallback);
std::string GetString(const nlohmann::json& j, const char* field, const std::string& source,
                      const std::string& fallback);
// The first entry of the required field "architectures" (a non-empty list of strings); a missing
// field names `expected`.
std::string GetArchitecture(const nlohmann::json& j, const std::string& source,
                            const std::string& expected);
// Fails with "`where`: <FailUnknownName's message>" unless `value` is one of `known` (`what`
// names the kind of value, e.g. "DFlash architecture").
void CheckKnownName(const std::string& value, const std::string& what,
                    const std::vector<std::string>& known, const std::string& where);
// A required list of integers (e.g. target layer ids).
std::vector<int64_t> GetIntList(const nlohmann::json& j, const char* field,
                                const std::string& source);

}  // namespace specbed::config_fields
