// JSON config field readers (see config_fields.h).
#include "models/config_fields.h"

#include <algorithm>

#include "base/error.h"
#include "base/names.h"

namespace specbed::config_fields {

using nlohmann::json;

bool Has(const json& j, const char* field) {
  return j.contains(field) && !j[field].is_null();
}

int64_t GetInt(const json& j, const char* field, const std::string& source) {
  SPECBED_CHECK(Has(j, field), source, ": missing required field \"", field, "\" (integer)");
  const json& v = j[field];
  SPECBED_CHECK(v.is_number_integer(), source, ": field \"", field, "\" must be an integer, got ",
                v.type_name(), " ", v.dump());
  SPECBED_CHECK(v.is_number_integer() &&
                    (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t{INT64_MAX}),
                source, ": field \"", field, "\" is out of range: ", v.dump());
  return v.get<int64_t>();
}

int64_t GetInt(const json& j, const char* field, const std::string& source, int64_t fallback) {
  return Has(j, field) ? GetInt(j, field, source) : fallback;
}

double GetDouble(const json& j, const char* field, const std::string& source) {
  SPECBED_CHECK(Has(j, field), source, ": missing required field \"", field, "\" (number)");
  const json& v = j[field];
  SPECBED_CHECK(v.is_number(), source, ": field \"", field, "\" must be a number, got ",
                v.type_name(), " ", v.dump());
  return v.get<double>();
}

double GetDouble(const json& j, const char* field, const std::string& source, double fallback) {
  return Has(j, field) ? GetDouble(j, field, source) : fallback;
}

bool GetBool(const json& j, const char* field, const std::string& source, bool fallback) {
  if (!Has(j, field)) return fallback;
  const json& v = j[field];
  SPECBED_CHECK(v.is_boolean(), source, ": field \"", field, "\" must be true or false, got ",
                v.type_name(), " ", v.dump());
  return v.get<bool>();
}

std::string GetString(const json& j, const char* field, const std::string& source,
                      const std::string& fallback) {
  if (!Has(j, field)) return fallback;
  const json& v = j[field];
  SPECBED_CHECK(v.is_string(), source, ": field \"", field, "\" must be a string, got ",
                v.type_name(), " ", v.dump());
  return v.get<std::string>();
}

std::string GetArchitecture(const json& j, const std::string& source, const std::string& expected) {
  SPECBED_CHECK(Has(j, "architectures"), source, ": missing field \"architectures\" (expected [\"",
                expected, "\"])");
  const json& archs = j["architectures"];
  SPECBED_CHECK(archs.is_array() && !archs.empty() && archs[0].is_string(), source,
                ": field \"architectures\" must be a non-empty array of strings, got ",
                archs.dump());
  return archs[0].get<std::string>();
}

void CheckKnownName(const std::string& value, const std::string& what,
                    const std::vector<std::string>& known, const std::string& where) {
  if (std::find(known.begin(), known.end(), value) != known.end()) return;
  try {
    FailUnknownName(what, value, known);
  } catch (const Error& e) {
    Fail(where, ": ", e.what());
  }
}

std::vector<int64_t> GetIntList(const json& j, const char* field, const std::string& source) {
  const json& v = j[field];
  SPECBED_CHECK(v.is_array(), source, ": field \"", field,
                "\" must be a list of target layer ids, got ", v.dump());
  std::vector<int64_t> ids;
  for (const auto& e : v) {
    SPECBED_CHECK(e.is_number_integer(), source, ": field \"", field,
                  "\" must contain only integers, got ", v.dump());
    ids.push_back(e.get<int64_t>());
  }
  return ids;
}

}  // namespace specbed::config_fields
