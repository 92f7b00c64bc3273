package llm

import (
	"strings"
	"sync"
)

// Price is USD per million tokens.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// DefaultPrices are list prices per million tokens (USD) of common models;
// override them with your own table (--llm-prices FILE).
var DefaultPrices = map[string]Price{
	"gpt-4o-mini":  {Input: 0.15, Output: 0.60},
	"gpt-4o":       {Input: 2.50, Output: 10.00},
	"gpt-4.1":      {Input: 2.00, Output: 8.00},
	"gpt-4.1-mini": {Input: 0.40, Output: 1.60},
	"gpt-4.1-nano": {Input: 0.10, Output: 0.40},
	"o4-mini":      {Input: 1.10, Output: 4.40},
	"o3":           {Input: 2.00, Output: 8.00},
}

// Pricing turns token counts into cost. An unknown model costs zero, and the
// first time it is seen warn is called.
type Pricing struct {
	Prices map[string]Price
	Warn   func(model string)

	once sync.Map // model -> warned
}

// Cost of one call.
func (p *Pricing) Cost(model string, prompt, completion int) float64 {
	c, _ := p.Price(model, Usage{InputTokens: prompt, OutputTokens: completion})
	return c
}

// Price of one call's usage, and whether the model has a price at all.
// Cached input is a tenth of the input price, writes to the cache a
// quarter more (the common list-price shape).
func (p *Pricing) Price(model string, u Usage) (float64, bool) {
	price, ok := p.Prices[model]
	if !ok { // dated variants (gpt-4o-mini-2024-07-18): the longest name that prefixes it
		best := ""
		for name, pr := range p.Prices {
			if strings.HasPrefix(model, name+"-") && len(name) > len(best) {
				best, price, ok = name, pr, true
			}
		}
	}
	if !ok {
		if _, warned := p.once.LoadOrStore(model, true); !warned && p.Warn != nil {
			p.Warn(model)
		}
		return 0, false
	}
	in := float64(u.InputTokens-u.CacheReadTokens) * price.Input
	cached := float64(u.CacheReadTokens) * price.Input * 0.10
	written := float64(u.CacheWriteTokens) * price.Input * 1.25
	return (in + cached + written + float64(u.OutputTokens)*price.Output) / 1e6, true
}
