// The results database's DDL (schema_sql.cpp): the first schema and each migration, for
// results/store.cpp. Checked by: tests/results/store_test.cpp,
// tests/results/record_schema_test.cpp.
#pragma once

#include <string>

namespace specbed {

// Schema version 1 (tables, indexes, append-only triggers, the steps_v view).
extern const char* const kSchemaV1;

// The SQL that upgrades version `v` to `v + 1` (1 <= v < kResultsSchemaVersion).
std::string MigrationSql(int v);

}  // namespace specbed
