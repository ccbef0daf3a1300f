#include "cli/output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "cli/api.h"
#include "common/bytes.h"

namespace fp::cli {

nlohmann::json WithoutNulls(const nlohmann::json& value) {
  if (value.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, item] : value.items()) {
      if (!item.is_null()) out[key] = WithoutNulls(item);
    }
    return out;
  }
  if (value.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : value) out.push_back(WithoutNulls(item));
    return out;
  }
  return value;
}

namespace {

// A timestamp as chrono prints a DateTime<Utc> (the oxide CLI re-serialises them): the
// fraction of a second in 3, 6 or 9 digits, as few as hold it, or none when it is zero.
std::string ChronoTime(const std::string& text) {
  size_t dot = text.find('.');
  if (dot == std::string::npos || text.size() < dot + 2 || text.back() != 'Z') return text;
  std::string digits = text.substr(dot + 1, text.size() - dot - 2);
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return text;
  }
  digits.resize(9, '0');
  size_t keep = 9;
  while (keep > 0 && digits.substr(keep - 3, 3) == "000") keep -= 3;
  return text.substr(0, dot) + (keep == 0 ? "" : "." + digits.substr(0, keep)) + "Z";
}

// As serde prints Oxide's types: fields in schema order (alphabetical here), except that an
// internally tagged enum (ExternalIp's `kind`) prints its tag first; timestamps as chrono.
nlohmann::ordered_json Ordered(const nlohmann::json& value) {
  if (value.is_object()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    if (value.contains("kind")) out["kind"] = Ordered(value["kind"]);
    for (const auto& [key, item] : value.items()) {
      if (key == "kind") continue;
      if (key.rfind("time_", 0) == 0 && item.is_string()) {
        out[key] = ChronoTime(item.get<std::string>());
      } else {
        out[key] = Ordered(item);
      }
    }
    return out;
  }
  if (value.is_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& item : value) out.push_back(Ordered(item));
    return out;
  }
  return nlohmann::ordered_json::parse(Dump(value));
}

std::string PrettyText(const nlohmann::json& value) {
  return Ordered(WithoutNulls(value))
      .dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

std::string PrettyJson(const nlohmann::json& value) { return PrettyText(value) + "\n"; }

void Out(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) std::_Exit(errno == EPIPE ? 0 : 1);
    done += static_cast<size_t>(n);
  }
}

Column FieldColumn(const std::string& field) {
  // The fields Oxide types as ByteCount: shown in binary units in a table ("1 GiB").
  const bool bytes = field == "memory" || field == "storage" || field == "usable_physical_ram";
  return Column{field, [field, bytes](const nlohmann::json& item) -> std::string {
                  if (!item.is_object() || !item.contains(field)) return "";
                  const auto& v = item[field];
                  if (v.is_null()) return "";
                  if (v.is_string()) return v.get<std::string>();
                  if (bytes && v.is_number_unsigned()) return ShowByteCount(v.get<uint64_t>());
                  // A whole number carried as a float (a pool's capacity) reads as one.
                  if (v.is_number_float()) {
                    double d = v.get<double>();
                    if (d == std::floor(d) && std::fabs(d) < 9.0e15) {
                      return fmt::format("{}", static_cast<int64_t>(d));
                    }
                  }
                  return Dump(v);
                }};
}

CliResult<OutputFormat> ParseOutputFormat(const std::string& text) {
  OutputFormat format;
  if (text == "json") return format;
  if (text == "table" || text.rfind("table:", 0) == 0) {
    format.table = true;
    if (text.size() > 6) {
      std::string list = text.substr(6);
      size_t start = 0;
      while (start <= list.size()) {
        size_t comma = list.find(',', start);
        std::string name = list.substr(start, comma == std::string::npos ? comma : comma - start);
        if (name.empty()) return Fail(UsageError("--format table: a column name is empty"));
        format.columns.push_back(name);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    return format;
  }
  return Fail(UsageError(
      fmt::format("--format: expected json, table or table:COLUMN,..., not \"{}\"", text)));
}

CliResult<ListPrinter> ListPrinter::Make(const OutputFormat& format, std::vector<Column> columns,
                                         const std::vector<std::string>& defaults) {
  ListPrinter p;
  p.format_ = format;
  if (!format.table) return p;
  const std::vector<std::string>& wanted = format.columns.empty() ? defaults : format.columns;
  for (const std::string& name : wanted) {
    auto it = std::find_if(columns.begin(), columns.end(),
                           [&](const Column& c) { return c.name == name; });
    if (it == columns.end()) {
      std::string valid;
      for (const Column& c : columns) valid += (valid.empty() ? "" : ", ") + c.name;
      return Fail(
          UsageError(fmt::format("--format: no column \"{}\"; the columns are: {}", name, valid)));
    }
    p.shown_.push_back(*it);
  }
  return p;
}

void ListPrinter::Add(const nlohmann::json& item) {
  if (!format_.table) {
    std::string text = PrettyText(item);
    // Indented one level inside the array.
    std::string indented = "  ";
    for (char c : text) {
      indented += c;
      if (c == '\n') indented += "  ";
    }
    // As the oxide CLI streams a list: `  }, {` between items, not serde's `},\n  {`.
    Out(items_ == 0 ? "[\n" + indented : ", " + indented.substr(2));
    ++items_;
    return;
  }
  std::vector<std::string> row;
  for (const Column& c : shown_) row.push_back(c.cell(item));
  rows_.push_back(std::move(row));
  ++items_;
}

void ListPrinter::Finish() {
  if (!format_.table) {
    Out(items_ == 0 ? "[]\n" : "\n]\n");
    return;
  }
  std::vector<size_t> width(shown_.size(), 0);
  std::vector<std::string> header;
  for (size_t i = 0; i < shown_.size(); ++i) {
    std::string h = shown_[i].name;
    std::transform(h.begin(), h.end(), h.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    header.push_back(h);
    if (format_.header) width[i] = h.size();
  }
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      out += cells[i];
      if (i + 1 < cells.size()) out += std::string(width[i] - cells[i].size() + 2, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string text;
  if (format_.header) text += line(header);
  for (const auto& row : rows_) text += line(row);
  Out(text);
}

CliStatus PrintObject(const OutputFormat& format, const nlohmann::json& value,
                      std::vector<Column> columns, const std::vector<std::string>& defaults) {
  if (!format.table) {
    Out(PrettyJson(value));
    return {};
  }
  if (columns.empty()) {
    for (const auto& [key, item] : value.items()) {
      columns.push_back(FieldColumn(key));
    }
  }
  std::vector<std::string> shown = defaults;
  if (shown.empty()) {
    for (const Column& c : columns) shown.push_back(c.name);
  }
  ListPrinter printer = FP_TRY(ListPrinter::Make(format, std::move(columns), shown));
  printer.Add(value);
  printer.Finish();
  return {};
}

}  // namespace fp::cli
