// Stored records as JSON through their field tables (results/record_schema.h): one key per field,
// named as its column, "not recorded" values (NaN, or negative for kMinusOne / kNull fields) as
// null. Used by the samples/steps export and the summary's case identity, so a new field reaches
// them without a line here. Checked by: tests/results/record_schema_test.cpp (every field
// exported) and tests/reports/export_test.cpp.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "results/record_schema.h"

namespace specbed {

// The value of `f` in `record` as JSON (strings as stored; see above for numbers).
template <typename R>
nlohmann::ordered_json FieldJson(const R& record, const Field<R>& f) {
  nlohmann::ordered_json out;
  VisitField(record, f, [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, std::string>) {
      out = v;
    } else if constexpr (std::is_floating_point_v<V>) {
      const bool missing = v != v || std::isinf(v) || IsNotRecorded(f.not_recorded, v);
      out = missing ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v);
    } else {
      out = IsNotRecorded(f.not_recorded, v) ? nlohmann::ordered_json(nullptr)
                                             : nlohmann::ordered_json(v);
    }
  });
  return out;
}

// Appends every field of `record` to the object `out`, in the table's order.
template <typename R>
void AppendRecordJson(const R& record, const std::vector<Field<R>>& fields,
                      nlohmann::ordered_json& out) {
  for (const Field<R>& f : fields) out[f.name] = FieldJson(record, f);
}

}  // namespace specbed
