package config

import (
	"fmt"
	"slices"
	"strings"
)

// ExpressZonesSource is where ExpressZones was copied from. Checked on the
// stored copy of the page (docs.aws.amazon.com, "S3 Express One Zone
// Availability Zones and Regions", and the "Regional and Zonal endpoints
// for directory buckets in an Availability Zone" table of the same guide);
// AWS adds regions and zones over time, so a region missing here may be
// offered today: check the page and add it.
const ExpressZonesSource = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/s3-express-Endpoints.html"

// ExpressZones are the zone IDs that host S3 Express One Zone directory
// buckets, by region (from ExpressZonesSource). The Express chain writes
// K = 3 directory buckets in three zones, so only the regions with three
// entries can run starlog.
var ExpressZones = map[string][]string{
	"us-east-1":      {"use1-az4", "use1-az5", "use1-az6"},
	"us-east-2":      {"use2-az1", "use2-az2"},
	"us-west-2":      {"usw2-az1", "usw2-az3", "usw2-az4"},
	"ap-south-1":     {"aps1-az1", "aps1-az3"},
	"ap-northeast-1": {"apne1-az1", "apne1-az4"},
	"eu-west-1":      {"euw1-az1", "euw1-az3"},
	"eu-north-1":     {"eun1-az1", "eun1-az2", "eun1-az3"},
}

// ZoneIDPrefixes are the zone ID prefixes of the regions in ExpressZones
// (use1-az4 is a us-east-1 zone ID): a zone ID must be one of its region's.
var ZoneIDPrefixes = map[string]string{
	"us-east-1":      "use1",
	"us-east-2":      "use2",
	"us-west-2":      "usw2",
	"ap-south-1":     "aps1",
	"ap-northeast-1": "apne1",
	"eu-west-1":      "euw1",
	"eu-north-1":     "eun1",
}

// ExpressRegions are the regions that offer three S3 Express zones.
func ExpressRegions() []string {
	var out []string
	for r, zones := range ExpressZones {
		if len(zones) >= 3 {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// checkExpressZones reports why region and zoneIDs cannot hold the Express
// bucket set: the region must offer three S3 Express zones, and each zone
// ID must be one of that region's that hosts directory buckets.
func checkExpressZones(region string, zoneIDs []string) []string {
	zones, known := ExpressZones[region]
	if !known {
		return []string{fmt.Sprintf("region %q does not offer S3 Express One Zone (regions with three zones: %s; source %s)",
			region, strings.Join(ExpressRegions(), ", "), ExpressZonesSource)}
	}
	if len(zones) < 3 {
		return []string{fmt.Sprintf("region %q offers S3 Express One Zone in %d zones only (%s); the Express chain needs three (K=3): use one of %s",
			region, len(zones), strings.Join(zones, ", "), strings.Join(ExpressRegions(), ", "))}
	}
	var errs []string
	prefix := ZoneIDPrefixes[region]
	for _, id := range zoneIDs {
		switch {
		case !strings.HasPrefix(id, prefix+"-az"):
			errs = append(errs, fmt.Sprintf("availability zone ID %q is not a zone ID of %s (those are %s-az…)", id, region, prefix))
		case !slices.Contains(zones, id):
			errs = append(errs, fmt.Sprintf("availability zone ID %q does not host S3 Express directory buckets (in %s: %s)", id, region, strings.Join(zones, ", ")))
		}
	}
	return errs
}
