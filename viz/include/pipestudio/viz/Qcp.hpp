#pragma once
/// \file Includes <qcustomplot.h> under our QT_NO_KEYWORDS / QT_NO_FOREACH defines: the
/// QCustomPlot 2.1 header still spells `signals:` and `foreach`, so they are mapped to their
/// Q_ forms for the duration of the include only.

#if defined(QT_NO_KEYWORDS) && !defined(signals)
#define PIPESTUDIO_QCP_UNDEF_KEYWORDS
#define signals Q_SIGNALS
#define slots Q_SLOTS
#define emit Q_EMIT
// A declaration cannot be parenthesised.
#define foreach(declaration, container) for (declaration : container)  // NOLINT(bugprone-macro-parentheses)
#endif

#include <qcustomplot.h>

#ifdef PIPESTUDIO_QCP_UNDEF_KEYWORDS
#undef signals
#undef slots
#undef emit
#undef foreach
#undef PIPESTUDIO_QCP_UNDEF_KEYWORDS
#endif
