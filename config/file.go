package config

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/internal/regfile"
	"github.com/sluicehq/sluice/oidcauth"
	"github.com/sluicehq/sluice/price"
)

// ConfigFlag is the flag that names a config file: TOML whose keys are
// the settings' environment names, exactly as the table spells them
// (BATCH_MAX_CONCURRENCY = 16). One spelling only, so that a file, an
// environment and docs/settings.md read the same; a lowercase key is an unknown
// one, and the error says which name was meant.
const ConfigFlag = "config"

// fileValue is one setting as a config file gives it, as the text the
// environment would have given, or why it cannot be one.
type fileValue struct {
	text string
	bad  error // a TOML array, table or date: not a setting's value
}

// fileTables are the config file's sections that are no setting.
type fileTables struct {
	prices     *price.Table     // nil without a [prices] section; see prices.go
	budgets    []budget.Spec    // its [[budgets]]; see budgets.go
	backends   []Backend        // its [[backends]]; see backends.go
	oidcGroups []oidcauth.Group // its [[oidc_groups]]; see oidcgroups.go
}

// readFile reads the config file at path: its settings, and its tables.
func readFile(path string) (map[string]fileValue, fileTables, error) {
	var t fileTables
	data, err := regfile.ReadFile(path, -1)
	if err != nil {
		return nil, t, fmt.Errorf("config file: %w", err)
	}
	vals, err := parseFile(path, data)
	if err != nil {
		return nil, t, err
	}
	if _, ok := vals[pricesKey]; ok {
		delete(vals, pricesKey)
		if t.prices, err = decodePrices(path, data); err != nil {
			return nil, t, err
		}
	}
	if _, ok := vals[budgetsKey]; ok {
		delete(vals, budgetsKey)
		if t.budgets, err = decodeBudgets(path, data); err != nil {
			return nil, t, err
		}
	}
	if _, ok := vals[oidcGroupsKey]; ok {
		delete(vals, oidcGroupsKey)
		if t.oidcGroups, err = decodeOIDCGroups(path, data); err != nil {
			return nil, t, err
		}
	}
	if _, ok := vals[backendsKey]; ok {
		delete(vals, backendsKey)
		if t.backends, err = decodeBackends(path, data); err != nil {
			return nil, t, err
		}
	}
	return vals, t, nil
}

// parseFile decodes a config file's data; name is for the errors. A key
// that names no setting is an error, which names the setting most like it.
func parseFile(name string, data []byte) (map[string]fileValue, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("config file %s: %s", name, pe.Error()) // one line, with its line number
		}
		return nil, fmt.Errorf("config file %s: %w", name, err)
	}
	var unknown []string
	vals := make(map[string]fileValue, len(raw))
	for key, v := range raw {
		if key == pricesKey {
			if _, ok := v.(map[string]any); !ok {
				return nil, fmt.Errorf("config file %s: %w", name, errPricesNotTable)
			}
			vals[key] = fileValue{} // read apart, by readFile
			continue
		}
		if key == backendsKey {
			if _, ok := v.([]map[string]any); !ok {
				return nil, fmt.Errorf("config file %s: %w", name, errBackendsNotArray)
			}
			vals[key] = fileValue{}
			continue
		}
		if key == budgetsKey {
			if _, ok := v.([]map[string]any); !ok {
				return nil, fmt.Errorf("config file %s: %w", name, errBudgetsNotArray)
			}
			vals[key] = fileValue{}
			continue
		}
		if key == oidcGroupsKey {
			if _, ok := v.([]map[string]any); !ok {
				return nil, fmt.Errorf("config file %s: %w", name, errOIDCGroupsNotArray)
			}
			vals[key] = fileValue{}
			continue
		}
		if _, ok := settingByEnv(key); !ok {
			unknown = append(unknown, unknownKey(key))
			continue
		}
		vals[key] = asText(v)
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("config file %s: %s", name, strings.Join(unknown, "; "))
	}
	return vals, nil
}

// unknownKey describes a key that names no setting.
func unknownKey(key string) string {
	near, _ := closest(key)
	msg := fmt.Sprintf("unknown setting %q; did you mean %s?", key, near)
	if strings.EqualFold(key, near) {
		msg += " (keys are the environment names, in capitals)"
	}
	return msg
}

// asText turns a TOML value into the text the environment would carry, so
// that every setting is parsed, and its errors worded, one way: 16 and
// "16" are both 16, true and "on" both on, and 1.5 is "not a whole
// number" wherever it comes from.
func asText(v any) fileValue {
	switch v := v.(type) {
	case string:
		return fileValue{text: v}
	case int64:
		return fileValue{text: strconv.FormatInt(v, 10)}
	case bool:
		return fileValue{text: strconv.FormatBool(v)}
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return fileValue{text: fmt.Sprint(v)}
		}
		return fileValue{text: strconv.FormatFloat(v, 'f', -1, 64)}
	case []any, []map[string]any:
		return fileValue{text: fmt.Sprint(v), bad: errors.New("an array, not a single value")}
	case map[string]any:
		return fileValue{text: fmt.Sprint(v), bad: errors.New("a table, not a single value")}
	}
	return fileValue{text: fmt.Sprint(v), bad: errors.New("a date or time, not a setting's value")}
}
