#include "api/system.h"

#include "api/metrics.h"

namespace fp::api {

std::optional<HttpResponse> ServeSystem(const HttpRequest& req, const Services& services,
                                        const std::function<HttpServerStats()>& http_stats,
                                        const HttpMetrics* http_metrics,
                                        const std::function<void(std::string&)>& more_metrics) {
  if (req.method != "GET") return std::nullopt;
  if (req.path == "/v1/ping") return JsonResponse(200, Json{{"status", "ok"}});
  if (req.path != "/metrics") return std::nullopt;
  // Prometheus text format; no secrets here, so no token (like ping).
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  app::StoreCounters counters = services.store_stats.Counters();
  r.body = StoreMetrics(counters);
  r.body += TransactionMetrics(counters);
  r.body += ProcessMetrics();
  auto history = services.store_stats.History();
  if (!history) return ErrorResponse(req, history.error());
  r.body += HistoryMetrics(*history);
  if (http_stats) r.body += AdmissionMetrics(http_stats());
  if (http_metrics) http_metrics->Render(r.body);
  if (more_metrics) more_metrics(r.body);
  return r;
}

}  // namespace fp::api
