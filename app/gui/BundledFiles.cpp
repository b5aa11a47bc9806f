#include "BundledFiles.hpp"

#include <QDir>
#include <QFile>
#include <map>

#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/model/ModelIO.hpp"

namespace pipestudio::gui {

namespace {

enum class Kind { Model, Cluster };

/// name → document, read once from the resources (`:/models`, `:/clusters`).
const std::map<std::string, BundledDocument>& bundled(Kind kind) {
  static std::map<std::string, BundledDocument> models;
  static std::map<std::string, BundledDocument> clusters;
  static bool loaded = false;
  if (!loaded) {
    loaded = true;
    for (const Kind k : {Kind::Model, Kind::Cluster}) {
      const QString folder = k == Kind::Model ? QStringLiteral(":/models") : QStringLiteral(":/clusters");
      for (const QString& name : QDir(folder).entryList({QStringLiteral("*.json")}, QDir::Files, QDir::Name)) {
        QFile file(folder + QLatin1Char('/') + name);
        if (!file.open(QIODevice::ReadOnly)) continue;
        auto doc = parseJson(file.readAll().toStdString(), name.toStdString());
        if (!doc) continue;
        JsonReader reader(*doc);
        if (k == Kind::Model) {
          if (auto m = readModel(reader, reader.root()); m && reader.ok())
            models.emplace(m->name, BundledDocument{name, modelToJson(*m), *m, std::nullopt});
        } else {
          if (auto c = readCluster(reader, reader.root()); c && reader.ok())
            clusters.emplace(c->name, BundledDocument{name, clusterToJson(*c), std::nullopt, *c});
        }
      }
    }
  }
  return kind == Kind::Model ? models : clusters;
}

std::optional<BundledDocument> find(Kind kind, const std::string& name) {
  const auto& documents = bundled(kind);
  const auto it = documents.find(name);
  if (it == documents.end()) return std::nullopt;
  return it->second;
}

QString shortJson(const Json& value) {
  QString text = QString::fromStdString(value.dump(-1, ' ', false, Json::error_handler_t::replace));
  constexpr int kMaxChars = 40;
  if (text.size() > kMaxChars) text = text.left(kMaxChars - 1) + QStringLiteral("…");
  return text;
}

}  // namespace

std::optional<BundledDocument> bundledCluster(const std::string& name) { return find(Kind::Cluster, name); }
std::optional<BundledDocument> bundledModel(const std::string& name) { return find(Kind::Model, name); }

QStringList jsonDifferences(const Json& file, const Json& copy, int max) {
  QStringList out;
  int more = 0;
  // A JSON Patch from the file to the copy: one operation per field that differs.
  for (const Json& op : Json::diff(file, copy)) {
    const std::string path = op.value("path", "");
    if (path.rfind("/description", 0) == 0) continue;
    if (static_cast<int>(out.size()) >= max) {
      ++more;
      continue;
    }
    const QString field = QString::fromStdString(path.substr(path.empty() ? 0 : 1));
    const std::string what = op.value("op", "");
    const Json::json_pointer pointer(path);
    if (what == "remove") {
      out << QStringLiteral("%1 missing (the file: %2)").arg(field, shortJson(file.at(pointer)));
    } else if (what == "add") {
      out << QStringLiteral("%1: %2 (not in the file)").arg(field, shortJson(op.at("value")));
    } else {
      out << QStringLiteral("%1: %2 (the file: %3)")
                 .arg(field, shortJson(op.value("value", Json())), shortJson(file.at(pointer)));
    }
  }
  if (more > 0) out << QStringLiteral("%1 more").arg(more);
  return out;
}

}  // namespace pipestudio::gui
