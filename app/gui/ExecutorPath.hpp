#pragma once
// Where the window finds pipestudio-exec, for Plan > Run Locally and Deploy alike.

#include <QString>

namespace pipestudio::gui {

/// pipestudio-exec for the window's local runs and deployments: $PIPESTUDIO_EXEC, next to the
/// application or in the build tree's executor/, then PATH (what `pipestudio-cli deploy` does).
QString guiExecutorPath();

}  // namespace pipestudio::gui
