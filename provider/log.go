package provider

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// Logging of the library: one line per message to stderr,
//
//	goiwarp[<pid>]: <level>: <message>
//
// filtered by GOIWARP_LOG = error | warn | info | debug (default warn), read
// once, at the first message. The library logs sparingly: errors it cannot
// report through an API return value or event (warn/error), connection
// life-cycle (info), protocol and CM tracing (debug). rdmacm and capi use
// these helpers too.

// LogLevel orders the levels: a message is printed when its level is at most
// the configured one.
type LogLevel int

// Log levels, most severe first.
const (
	LevelError LogLevel = iota
	LevelWarn
	LevelInfo
	LevelDebug
)

var levelNames = [...]string{"error", "warn", "info", "debug"}

func (l LogLevel) String() string {
	if l >= 0 && int(l) < len(levelNames) {
		return levelNames[l]
	}
	return fmt.Sprintf("level%d", int(l))
}

// ParseLogLevel reads a GOIWARP_LOG value (case-insensitive; "warning" and
// the digits 0-3 are accepted too).
func ParseLogLevel(s string) (LogLevel, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "error", "err", "0":
		return LevelError, true
	case "warn", "warning", "1":
		return LevelWarn, true
	case "info", "2":
		return LevelInfo, true
	case "debug", "trace", "3":
		return LevelDebug, true
	}
	return LevelWarn, false
}

var (
	logOnce  sync.Once
	logLevel LogLevel
	logMu    sync.Mutex // one line at a time
	logOut   = os.Stderr
)

func configuredLevel() LogLevel {
	logOnce.Do(func() {
		logLevel = LevelWarn
		if v, ok := os.LookupEnv("GOIWARP_LOG"); ok && strings.TrimSpace(v) != "" {
			l, good := ParseLogLevel(v)
			if good {
				logLevel = l
			} else {
				logForce(LevelWarn, "ignoring GOIWARP_LOG=%q (error|warn|info|debug)", v)
			}
		}
	})
	return logLevel
}

// LogEnabled reports whether messages of level l are printed; callers use it
// to skip building expensive messages.
func LogEnabled(l LogLevel) bool { return l <= configuredLevel() }

// Logf prints one message at level l if GOIWARP_LOG lets it through.
func Logf(l LogLevel, format string, args ...any) {
	if !LogEnabled(l) {
		return
	}
	logForce(l, format, args...)
}

// logForce prints regardless of the level (GOIWARP_CM_TRACE uses it through
// LogForce).
func logForce(l LogLevel, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	msg = strings.TrimRight(msg, "\n")
	line := fmt.Sprintf("goiwarp[%d]: %s: %s\n", os.Getpid(), l, msg)
	logMu.Lock()
	_, _ = logOut.WriteString(line)
	logMu.Unlock()
}

// LogForce prints one message whatever GOIWARP_LOG says; for switches of
// their own such as GOIWARP_CM_TRACE.
func LogForce(l LogLevel, format string, args ...any) { logForce(l, format, args...) }

// Convenience wrappers.

// Errorf logs at error level.
func Errorf(format string, args ...any) { Logf(LevelError, format, args...) }

// Warnf logs at warn level.
func Warnf(format string, args ...any) { Logf(LevelWarn, format, args...) }

// Infof logs at info level.
func Infof(format string, args ...any) { Logf(LevelInfo, format, args...) }

// Debugf logs at debug level.
func Debugf(format string, args ...any) { Logf(LevelDebug, format, args...) }
