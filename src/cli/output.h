#pragma once

// What the client prints on stdout: Oxide's JSON by default (the API's fields, pretty-printed,
// absent optional fields left out as the oxide CLI's typed client leaves them out), or a table
// of chosen columns (--format table[:col,...]).

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/failure.h"

namespace fp::cli {

// Object properties whose value is null are left out, at every depth: the API's responses
// have no required property that may be null, so these are exactly the optional ones.
nlohmann::json WithoutNulls(const nlohmann::json& value);

// `value` as the oxide CLI prints one object: pretty, two spaces, a final newline.
std::string PrettyJson(const nlohmann::json& value);

// A table column: its header (upper case when printed) and how a row's cell is made.
struct Column {
  std::string name;
  std::function<std::string(const nlohmann::json& item)> cell;
};

// A column reading the item's field `field` (strings as they are, other values as compact
// JSON, null or absent as empty).
Column FieldColumn(const std::string& field);

struct OutputFormat {
  bool table = false;
  std::vector<std::string> columns;  // chosen with table:a,b; empty: the command's defaults
  bool header = true;
};

// Parses --format's value: "json", "table" or "table:a,b". UsageError otherwise.
CliResult<OutputFormat> ParseOutputFormat(const std::string& text);

// Streams a list's items to stdout, as JSON (one array, closed even when the stream fails) or
// as a table (rows gathered, then aligned).
class ListPrinter {
 public:
  // `columns`: every column this list can show; `defaults`: those shown without table:...
  // UsageError, naming the valid columns, for a chosen column that does not exist.
  static CliResult<ListPrinter> Make(const OutputFormat& format, std::vector<Column> columns,
                                     const std::vector<std::string>& defaults);
  void Add(const nlohmann::json& item);
  // Ends the output (the JSON array's bracket, or the table).
  void Finish();
  // Nothing was added yet.
  bool empty() const { return items_ == 0 && rows_.empty(); }

 private:
  ListPrinter() = default;
  OutputFormat format_;
  std::vector<Column> shown_;
  std::vector<std::vector<std::string>> rows_;
  size_t items_ = 0;
};

// Prints one object as JSON, or as a one-row table.
CliStatus PrintObject(const OutputFormat& format, const nlohmann::json& value,
                      std::vector<Column> columns = {},
                      const std::vector<std::string>& defaults = {});

// Writes to stdout; a closed pipe ends the process quietly with status 0 (`| head`).
void Out(const std::string& text);

}  // namespace fp::cli
