package node

import (
	"github.com/starlog/starlog/star/lead"
	"github.com/starlog/starlog/star/node/config"
)

// The configuration types live in star/node/config; these names keep them
// where the serve and dev commands, the harnesses and the docs find them.
type (
	// Config is everything a star process needs (config.Config).
	Config = config.Config
	// ClassConfig fixes one storage class's chain and loglet.
	ClassConfig = config.ClassConfig
	// MetaConfig selects the metastore.
	MetaConfig = config.MetaConfig
	// ObjectsConfig selects the object store.
	ObjectsConfig = config.ObjectsConfig
)

// DefaultAbsorbWriteBudget is the default of Config.AbsorbWriteBudget.
const DefaultAbsorbWriteBudget = config.DefaultAbsorbWriteBudget

// Defaults returns the built-in defaults (config.Defaults).
func Defaults() Config { return config.Defaults() }

// ValidateStarID checks a star id (lead.ValidateStarID).
func ValidateStarID(id string) error { return lead.ValidateStarID(id) }

// DefaultStarID derives a star id from the hostname (lead.DefaultStarID).
func DefaultStarID() string { return lead.DefaultStarID() }

// SanitizeStarID turns any string into a valid star id (lead.SanitizeStarID).
func SanitizeStarID(s string) string { return lead.SanitizeStarID(s) }
