// The web UI's files, built into the binary (host/web/ and Debian's
// Chart.js), so the UI and `tunehost report` work with no internet and no
// install tree.
#pragma once

#include <string_view>

namespace tunehost::host::web_assets {

extern const std::string_view kIndexHtml;  // host/web/index.html
extern const std::string_view kAppCss;     // host/web/app.css
extern const std::string_view kAppJs;      // host/web/app/*.js, joined
extern const std::string_view kChartJs;    // /usr/share/javascript/chart.js/chart.min.js

}  // namespace tunehost::host::web_assets
