package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/sluicehq/sluice/price"
)

// pricesKey is the config file's section of negotiated prices: one table
// per model id, each giving all five rates in USD per million tokens.
//
//	[prices."claude-sonnet-4-5"]
//	input = 2.40
//	output = 12
//	cache_write_5m = 3
//	cache_write_1h = 4.80
//	cache_read = 0.24
//
// It is no setting: the environment and the flags have no way to spell a
// table, so the file alone sets it.
const pricesKey = "prices"

// rateNames are the keys of one model's table, as price.Rates names them.
var rateNames = []string{"input", "output", "cache_write_5m", "cache_write_1h", "cache_read"}

// decodePrices reads the [prices] section of the config file name, whose
// text is data, strictly: an unknown key or a missing rate is an error
// that names it, and so is a rate below 0.
func decodePrices(name string, data []byte) (*price.Table, error) {
	var f struct {
		Prices map[string]price.Rates `toml:"prices"`
	}
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, fmt.Errorf("config file %s: [%s]: %v; want a table per model id, such as [prices.\"claude-sonnet-4-5\"] with %s",
			name, pricesKey, err, strings.Join(rateNames, ", "))
	}
	var bad []string
	for _, k := range md.Undecoded() {
		if len(k) > 0 && k[0] == pricesKey {
			bad = append(bad, fmt.Sprintf("unknown key %s (a model's table takes %s)", k, strings.Join(rateNames, ", ")))
		}
	}
	for model := range f.Prices {
		var missing []string
		for _, r := range rateNames {
			if !md.IsDefined(pricesKey, model, r) {
				missing = append(missing, r)
			}
		}
		if len(missing) > 0 {
			bad = append(bad, fmt.Sprintf("%s.%q has no %s (give all five rates, in USD per million tokens)", pricesKey, model, strings.Join(missing, ", ")))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return nil, fmt.Errorf("config file %s: %s", name, strings.Join(bad, "; "))
	}
	t, err := price.New(f.Prices)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", name, err)
	}
	return t, nil
}

// errPricesNotTable is the error for a prices key that is a single value.
var errPricesNotTable = errors.New(`prices is a section of tables, one per model id, such as [prices."claude-sonnet-4-5"]`)
