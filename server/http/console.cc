// The web console at /: the files of its build (web/assets.h) and, for the
// path of any of its pages, its index.html (the page's script routes on
// the path). What the console shows it reads from /v1 with its session
// cookie, like any client; nothing here knows a user.
#include <string_view>

#include "server/http/api.h"
#include "web/assets.h"

namespace tide::server {

namespace {

// Scripts, styles and requests only from this server: no inline script,
// no other origin, never framed.
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'";

// The paths the console's router draws: /jobs, /jobs/ID, /new, ...
bool IsPage(std::string_view path) {
  for (std::string_view page :
       {"/", "/login", "/jobs", "/new", "/batches", "/account", "/provider", "/operator"}) {
    if (path == page) return true;
  }
  for (std::string_view list : {"/jobs/", "/batches/"}) {  // one of the list
    if (path.size() > list.size() && path.substr(0, list.size()) == list &&
        path.find('/', list.size()) == std::string_view::npos) {
      return true;
    }
  }
  return false;
}

Response FileResponse(const Request& req, const web::Asset& a, bool immutable) {
  Response r;
  r.content_type = std::string(a.content_type);
  if (req.method != "HEAD") r.body = std::string(a.body);
  r.headers["Content-Security-Policy"] = kContentSecurityPolicy;
  // Built files carry a hash of their content in their name: they never
  // change. The page itself is asked for again every time.
  r.headers["Cache-Control"] = immutable ? "public, max-age=31536000, immutable" : "no-cache";
  return r;
}

}  // namespace

Response Api::Console(const Request& req) {
  const std::string& path = req.path;
  if (path == "/login" && !req.Query("code").empty()) return LoginLink(req);
  if (IsPage(path)) {
    const web::Asset* index = web::FindAsset("/index.html");
    if (index == nullptr) return ErrorResponse(Status::Internal("the console was built empty"));
    return FileResponse(req, *index, false);
  }
  if (path != "/index.html") {
    if (const web::Asset* a = web::FindAsset(path)) {
      return FileResponse(req, *a, path.rfind("/assets/", 0) == 0);
    }
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + path));
}

}  // namespace tide::server
